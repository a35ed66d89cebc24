# Sourced by hack/build-control-plane.sh and hack/build-node.sh: one build step.
#
# step "label" command...: one line on stderr with the step's elapsed time; the
# command's output goes to "$log" (the sourcing script sets it), and on failure
# the log's tail and path, then exit with the command's code.
step() {
  local label="$1"; shift
  local t0; t0=$(date +%s)
  printf '  %s... ' "$label" >&2
  echo "== $label: $*" >> "$log"
  if "$@" >> "$log" 2>&1; then
    echo "$(( $(date +%s) - t0 )) s" >&2
  else
    local code=$?
    echo "FAILED after $(( $(date +%s) - t0 )) s (exit $code)" >&2
    echo "---- last 30 lines of $log" >&2
    tail -n 30 "$log" >&2
    echo "---- full build log: $log" >&2
    exit "$code"
  fi
}
