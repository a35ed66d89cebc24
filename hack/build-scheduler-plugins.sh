#!/usr/bin/env bash
# Builds sigs.k8s.io/scheduler-plugins' scheduler (kube-scheduler + Coscheduling
# and the other out-of-tree plugins) from its Go module, at the release that
# matches the local control plane's minor (see hack/scheduler-plugins-build/
# go.mod), into a cache outside the checkout so only the first run builds.
# It also copies that release's PodGroup CRD (scheduling.x-k8s.io) beside it.
# Only the benchmarks use it (bench/, "gang throughput" vs coscheduling).
#
#   hack/build-scheduler-plugins.sh          # build if missing, print the dir
#   FORCE=1 hack/build-scheduler-plugins.sh  # rebuild
#
# Output dir layout: bin/scheduler, manifests/coscheduling/{crd.yaml,scheduler-config.yaml}
set -euo pipefail

SP_VERSION=v0.34.7
K8S_VERSION=v1.34.4 # the k8s.io/* every module is replaced with (wrapper go.mod)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}"
out="$cache_root/scheduler-plugins-$SP_VERSION"
stamp="$out/.built-from"
want="$SP_VERSION k8s-$K8S_VERSION $(cat "$here/scheduler-plugins-build/go.mod" | sha256sum | cut -c1-16)"

if [[ "${FORCE:-0}" != 1 && -x "$out/bin/scheduler" && -f "$out/manifests/coscheduling/crd.yaml" \
      && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "scheduler-plugins $SP_VERSION: cached in $out" >&2
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { echo "go is required to build scheduler-plugins (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$out/bin" "$out/manifests/coscheduling"
start=$(date +%s)
echo "building scheduler-plugins $SP_VERSION into $out (first run only; ~5-20 min on 2 cores)" >&2

ldflags="$("$here/version-ldflags.sh" "$K8S_VERSION")"

# shellcheck source=lib/go-compile.sh
source "$here/lib/go-compile.sh"
cd "$here/scheduler-plugins-build"
export GOFLAGS="-mod=mod -buildvcs=false"
go mod download sigs.k8s.io/scheduler-plugins
go build -trimpath -ldflags "$ldflags" -o "$out/bin/scheduler" sigs.k8s.io/scheduler-plugins/cmd/scheduler

# The CRD and the reference config ship in the module itself.
moddir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)"
install -m 0644 "$moddir/manifests/coscheduling/crd.yaml" "$out/manifests/coscheduling/crd.yaml"
install -m 0644 "$moddir/manifests/coscheduling/scheduler-config.yaml" "$out/manifests/coscheduling/scheduler-config.yaml"

echo "$want" > "$stamp"
echo "scheduler-plugins built in $(( $(date +%s) - start ))s" >&2
echo "$out"
