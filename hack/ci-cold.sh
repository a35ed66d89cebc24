#!/usr/bin/env bash
# Runs .ci/run as a fresh CI machine would: on a fresh clone, with every cache
# empty, so the control planes, Kueue, helm and the real-node pieces are built from
# their Go modules (downloads included) and the venv is installed from nothing.
# The warm caches of this machine (~/.cache/gang-extender, Go's build and module
# caches, pip's cache) are not touched: the run gets a HOME of its own in a scratch
# directory, with XDG_CACHE_HOME, GOPATH, GOCACHE and GOMODCACHE inside it.
#
#   hack/ci-cold.sh               # clone HEAD into a scratch dir, run .ci/run, remove the dir
#   hack/ci-cold.sh REV           # another commit
#   KEEP=1 hack/ci-cold.sh        # keep the scratch dir (clone, caches, logs) afterwards
#   COLD_DIR=/var/tmp/x hack/ci-cold.sh   # the scratch dir (default: a new one in $TMPDIR or /tmp; ~15 GB)
#
# What stays as it is: the system's packages (Go, Python, OpenSSH, and the Debian
# packages a real node needs, where installed: build-node.sh then skips apt-get),
# the wheels in $PIP_FIND_LINKS, and the network settings: GOPROXY, GOSUMDB,
# GOFLAGS, GOTOOLCHAIN and friends are read from `go env` and passed on, and pip's
# PIP_* variables and /etc/pip.conf apply as before.
#
# The run's output goes to the terminal and to <scratch>/ci.log; the last lines
# are the wall time and the CPU seconds (user + sys) of the whole run, and the
# load average before and after (the machine should be idle: .ci/run takes both
# cores for most of an hour). Ctrl-C stops the run (the test fixtures stop
# their clusters) and removes the scratch dir unless KEEP=1.
set -euo pipefail

rev="${1:-HEAD}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
commit="$(git -C "$repo" rev-parse --verify "$rev^{commit}")"
if [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]]; then
  echo "note: the checkout has uncommitted changes; the cold run clones $commit without them" >&2
fi

scratch="${COLD_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gang-extender-ci-cold.XXXXXX")}"
mkdir -p "$scratch"
[[ -z "$(ls -A "$scratch")" ]] || { echo "$scratch is not empty: give an empty or new COLD_DIR" >&2; exit 2; }
avail_gb=$(( $(df -Pk "$scratch" | awk 'NR == 2 {print $4}') / 1024 / 1024 ))
(( avail_gb >= 20 )) || { echo "$scratch has $avail_gb GB free; a cold run needs about 15 GB" >&2; exit 2; }

# The network settings of Go as this user has them (some may live in the GOENV file
# under the old HOME), passed on as environment variables.
go_settings=()
for var in GOPROXY GOSUMDB GONOSUMDB GONOPROXY GOPRIVATE GOINSECURE GOFLAGS GOTOOLCHAIN; do
  go_settings+=("$var=$(go env "$var")")
done

run_pid=
cleanup() {
  local code=$?
  if [[ -n "$run_pid" ]]; then
    # The run is a session of its own (setsid): SIGINT to its foreground group
    # first, so pytest's fixtures stop the clusters and real nodes they started
    # and .ci/run stops its background builds; then whatever is left in the session.
    kill -INT -- "-$run_pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$run_pid" 2>/dev/null || break; sleep 1; done
    pkill -TERM -s "$run_pid" 2>/dev/null || true
    sleep 5
    pkill -KILL -s "$run_pid" 2>/dev/null || true
  fi
  if [[ "${KEEP:-0}" == 1 ]]; then
    echo "kept: $scratch (ci.log, clone/, home/)" >&2
  else
    # Go's module cache is read-only by design.
    chmod -R u+w "$scratch" 2>/dev/null || true
    rm -rf "$scratch"
  fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

home="$scratch/home"
mkdir -p "$home"
git clone --quiet --no-hardlinks "$repo" "$scratch/clone"
git -C "$scratch/clone" checkout --quiet --detach "$commit"

echo "== cold CI run of $commit in $scratch/clone (HOME=$home)"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# env -u: nothing may point the run at a prebuilt directory or a warm cache.
# setsid: the run in a session of its own, so that cleanup can stop all of it.
setsid env -u GANG_EXTENDER_CACHE -u GANG_E2E_BIN_DIR -u GANG_E2E_KUEUE_DIR -u GANG_NODE_DIR \
  -u GOENV -u GOCACHEPROG -u PIP_CACHE_DIR -u PIP_NO_CACHE_DIR \
  HOME="$home" XDG_CACHE_HOME="$home/.cache" XDG_CONFIG_HOME="$home/.config" \
  GOPATH="$home/go" GOCACHE="$home/.cache/go-build" GOMODCACHE="$home/go/pkg/mod" \
  "${go_settings[@]}" \
  /usr/bin/time -f '== cold CI: %e s wall, %U s user + %S s sys CPU, max RSS %M KB' \
  "$scratch/clone/.ci/run" > >(tee "$scratch/ci.log") 2>&1 &
run_pid=$!
code=0
wait "$run_pid" || code=$?
run_pid=
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$scratch/ci.log"
echo "== .ci/run exit code: $code" | tee -a "$scratch/ci.log"
exit "$code"
