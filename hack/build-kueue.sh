#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) from its Go module at the
# release pinned in hack/kueue-build/go.mod, into a cache outside the checkout so
# only the first run builds (~150 s on 2 cores). Beside the binary it copies
# that release's CRDs and webhook manifests, which extender/devcluster/kueue.py
# applies when it runs Kueue beside the local control plane (tests/e2e, and
# `gang-extender dev up --kueue`).
#
#   hack/build-kueue.sh          # build if missing, print the dir
#   FORCE=1 hack/build-kueue.sh  # rebuild
#
# Output dir layout: bin/kueue, crd/*.yaml, webhook/manifests.yaml.
# stdout: the dir only. stderr: one line per step with its elapsed time.
set -euo pipefail

KUEUE_VERSION=v0.17.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wrapper="$here/kueue-build"
cache_root="${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}"
out="$cache_root/kueue-$KUEUE_VERSION"
stamp="$out/.built-from"
log="$out/build.log"
# shellcheck source=lib/lock.sh
source "$here/lib/lock.sh"
# shellcheck source=lib/go-compile.sh
source "$here/lib/go-compile.sh"
build_lock "$out.lock"

want="$KUEUE_VERSION $(cat "$wrapper/go.mod" "$wrapper/go.sum" | sha256sum | cut -c1-16)"

if [[ "${FORCE:-0}" != 1 && -x "$out/bin/kueue" && -f "$out/webhook/manifests.yaml" \
      && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "kueue $KUEUE_VERSION: cached in $out" >&2
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { echo "go is required to build Kueue (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$out"
rm -f "$stamp"
: > "$log"
start=$(date +%s)
echo "building kueue $KUEUE_VERSION into $out (first run only; ~150 s on 2 cores)" >&2

# step "label" command...: one line on stderr a step; the output goes to "$log".
# shellcheck source=lib/steps.sh
source "$here/lib/steps.sh"

copy_manifests() {
  local moddir; moddir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
  rm -rf "$out/crd" "$out/webhook"
  mkdir -p "$out/crd" "$out/webhook"
  install -m 0644 "$moddir"/config/components/crd/bases/*.yaml "$out/crd/"
  install -m 0644 "$moddir/config/components/webhook/manifests.yaml" "$out/webhook/manifests.yaml"
}

cd "$wrapper"
export GOFLAGS="-mod=readonly -buildvcs=false"
step "download modules" go mod download sigs.k8s.io/kueue
step "build kueue (go build)" nice -n 10 go build -trimpath -o "$out/bin/kueue" sigs.k8s.io/kueue/cmd/kueue
step "copy CRDs and webhook manifests" copy_manifests

echo "$want" > "$stamp"
echo "kueue $KUEUE_VERSION built in $(( $(date +%s) - start ))s" >&2
echo "$out"
