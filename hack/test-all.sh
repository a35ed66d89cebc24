#!/usr/bin/env bash
# `make test`: lint, then every test in four parts (`make lint`, `make test-default`,
# `make test-oldest`, `make test-real`), overlapped with the builds they need and
# with each other. Builds what it needs (the venv, control-plane, Kueue, helm and
# real-node binaries from Go modules into ~/.cache/gang-extender; each a no-op once
# cached) and fails on anything but a green run; pytest's exit code 5 (no tests
# collected) fails too. CI (.ci/run) runs exactly this, through `make test`.
#
# Cold, the builds cost more CPU than the tests, and the tests wait on the API
# server more than they compute, so the order is what the critical path needs:
#   1. the default release's control plane (nice 0), the venv meanwhile; Kueue and
#      helm beside it at nice 10 (only some e2e modules use them);
#   2. after the venv, at nice 10: lint, the oldest release's control plane (then its
#      tier, `make test-oldest`, at once, beside the first tier) and the real-node
#      pieces;
#   3. once the control plane is built: the first tier (`make test-default`). The
#      modules that use Kueue or helm run after the other e2e modules, and their
#      fixtures wait for a build still under way (the build scripts hold a lock per
#      piece: a second run waits, then finds the cache);
#   4. the real tier (`make test-real`) once the first tier and the real-node build
#      are done (real nodes share the host's network: nothing else runs dev up/down
#      then).
# Each background job's output goes to .dev/test/<job>.log; a failed build fails
# the run with its log's tail; a test job's log is printed when it ends. The `+Ns`
# on the progress lines is the time since the run started.
#
# PYTEST_ARGS (from make, or the environment) goes to every pytest call.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
command -v go >/dev/null || { echo "make test needs Go >= 1.26 on PATH to build the control plane" >&2; exit 1; }
oldest="$(sed -n 's/^OLDEST_K8S_VERSION := //p' Makefile)"
# Every pytest call reads it (the Makefile takes it from the environment).
export PYTEST_ARGS="${PYTEST_ARGS:-}"
logs=.dev/test
mkdir -p "$logs"
declare -A job_pid=()
since() { echo "+$(( $(date +%s) - start ))s"; }
# job NAME COMMAND...: runs COMMAND in the background, in a process group of its
# own (stopped if the run ends first), output to $logs/NAME.log.
job() {
  local name="$1"; shift
  echo "== $name started $(since) (log: $logs/$name.log)"
  set -m
  ( t0=$(date +%s); code=0; "$@" || code=$?
    echo "== $name: exit $code after $(( $(date +%s) - t0 ))s, ended $(since)"; exit "$code" ) \
    > "$logs/$name.log" 2>&1 &
  set +m
  job_pid[$name]=$!
}
# finish NAME [print]: waits for the job; with `print`, prints its whole log (a test
# tier's output) when it ends. A failed job fails the run (a build with its log's tail).
finish() {
  local name="$1" print="${2:-}" code=0
  wait "${job_pid[$name]}" || code=$?
  unset "job_pid[$name]"
  if [[ "$print" == print ]]; then
    echo "== $name's output ($logs/$name.log):"
    cat "$logs/$name.log"
  elif (( code != 0 )); then
    echo "== $name FAILED (exit $code); the last 40 lines of $logs/$name.log:" >&2
    tail -n 40 "$logs/$name.log" >&2
  fi
  if (( code != 0 )); then
    echo "== $name FAILED (exit $code) $(since)" >&2
    return 1
  fi
  # (a printed log ends with that line already)
  [[ "$print" == print ]] || echo "== $name: $(tail -n 1 "$logs/$name.log" | sed 's/^== [^:]*: //')"
}
# On the way out, whatever still runs is stopped: SIGINT first, so that pytest's
# fixtures stop the clusters they started, then SIGTERM after a minute.
stop_jobs() {
  local name i
  (( ${#job_pid[@]} )) || return 0
  for name in "${!job_pid[@]}"; do kill -INT -- "-${job_pid[$name]}" 2>/dev/null || true; done
  for i in $(seq 60); do
    for name in "${!job_pid[@]}"; do
      kill -0 "${job_pid[$name]}" 2>/dev/null || unset "job_pid[$name]"
    done
    (( ${#job_pid[@]} )) || return 0
    sleep 1
  done
  for name in "${!job_pid[@]}"; do kill -TERM -- "-${job_pid[$name]}" 2>/dev/null || true; done
}
trap stop_jobs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. The first tier's control plane; Kueue and helm beside it at nice 10 (their
# go builds are the first to yield: the control plane gates the first tier, they
# only gate a few modules that run last); the venv meanwhile. build-kueue.sh runs
# its go build at nice 10 itself (nicer still, it would starve behind the later
# tiers' builds, which it comes before).
job control-plane hack/build-control-plane.sh
job kueue hack/build-kueue.sh
job helm nice -n 10 hack/build-helm.sh
make --no-print-directory .venv/bin/gang-extender
# 2. At nice 10: lint; the oldest release's control plane, then its tier (at nice 0:
# tests wait more than they compute); the real-node pieces where this machine can
# run them (make test-real skips the tier, saying why, where it cannot).
job lint nice -n 10 make --no-print-directory lint
job oldest-tier bash -c "
  nice -n 10 hack/build-control-plane.sh '$oldest' >/dev/null &&
  make --no-print-directory test-oldest"
if .venv/bin/python -m extender.devcluster.realnode --can-run; then
  job node nice -n 10 hack/build-node.sh
fi
finish control-plane
finish lint
# 3. The first tier: every test but the real tier on the default release, one
# pytest worker a core, each its own control plane.
echo "== first tier (make test-default) started $(since)"
code=0
make --no-print-directory test-default || code=$?
echo "== first tier ended $(since) (exit $code)"
# The builds the first tier's late modules used: a failed one made them skip.
finish kueue || code=1
finish helm || code=1
# 4. The real tier, after the first (and its build).
if (( code == 0 )); then
  if [[ -v 'job_pid[node]' ]]; then finish node || code=1; fi
  if (( code == 0 )); then
    echo "== real tier (make test-real) started $(since)"
    make --no-print-directory test-real || code=$?
    echo "== real tier ended $(since) (exit $code)"
  fi
fi
finish oldest-tier print || code=1
echo "== make test finished in $(( $(date +%s) - start ))s (exit $code)"
exit "$code"
