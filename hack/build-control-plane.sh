#!/usr/bin/env bash
# Builds the local test control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) from Go modules at one
# pinned version, into a cache outside the checkout so only the first run builds.
#
#   hack/build-control-plane.sh          # build if missing, print the bin dir
#   FORCE=1 hack/build-control-plane.sh  # rebuild
set -euo pipefail

K8S_VERSION=v1.34.4
KWOK_VERSION=v0.7.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}"
bin="$cache_root/k8s-$K8S_VERSION/bin"
stamp="$bin/.built-from"
# The stamp covers the wrapper module too: changing a pin rebuilds.
want="$K8S_VERSION kwok-$KWOK_VERSION $(cat "$here/k8s-build/go.mod" "$here/k8s-build/cmd/etcd/main.go" | sha256sum | cut -c1-16)"

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
have_all=1
for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || have_all=0; done
if [[ "${FORCE:-0}" != 1 && $have_all == 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "control plane $K8S_VERSION: cached in $bin" >&2
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "go is required to build the control plane (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$bin"
start=$(date +%s)
echo "building control plane $K8S_VERSION into $bin (first run only; ~12 min on 2 cores)" >&2

ldflags="$("$here/version-ldflags.sh" "$K8S_VERSION")"

cd "$here/k8s-build"
export GOFLAGS="-mod=mod -buildvcs=false"
go mod download
go build -trimpath -ldflags "$ldflags" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  ./cmd/etcd
# kwok is its own module; install it at its tag into the same bin dir.
(cd "$bin" && GOBIN="$bin" GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")

echo "$want" > "$stamp"
echo "control plane built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
