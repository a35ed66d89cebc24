# Sourced by the build scripts: one build of a piece at a time.
#
# build_lock FILE: an exclusive lock on FILE (created), held until the script exits.
# Another run of the same build waits here, then finds the cache filled: `make test`
# starts the builds the later test tiers need in the background, and a tier (or a
# test's fixture) asking for the same piece meanwhile waits for that build.
build_lock() {
  local lock="$1" t0
  mkdir -p "$(dirname "$lock")"
  exec {BUILD_LOCK_FD}>"$lock"
  if ! flock -n "$BUILD_LOCK_FD"; then
    t0=$(date +%s)
    echo "waiting for another build of the same piece to finish (lock: $lock)" >&2
    flock "$BUILD_LOCK_FD"
    echo "  ... waited $(( $(date +%s) - t0 )) s" >&2
  fi
}
