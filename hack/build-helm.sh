#!/usr/bin/env bash
# Builds helm from its Go module at one pinned version, like the control plane
# (hack/build-control-plane.sh), into a cache outside the checkout so only the
# first run builds. The chart tests (tests/e2e/test_chart.py) render, lint
# and install charts/gang-extender with it.
#
#   hack/build-helm.sh           # build if missing, print the path of the binary
#   FORCE=1 hack/build-helm.sh   # rebuild
#
# helm v3.22 asks for Go >= 1.26 in its go.mod; an older go fetches that toolchain
# itself (GOTOOLCHAIN=auto, the default). Measured: 746 s on 2 busy cores, the
# module downloads included (3m20s of CPU).
set -euo pipefail

HELM_VERSION=v3.22.0
cache_root="${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}"
out="$cache_root/helm-$HELM_VERSION"
helm="$out/helm"
stamp="$out/.built-from"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/lock.sh
source "$here/lib/lock.sh"
# shellcheck source=lib/go-compile.sh
source "$here/lib/go-compile.sh"
build_lock "$out.lock"

want="$HELM_VERSION"

if [[ "${FORCE:-0}" != 1 && -x "$helm" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "helm $HELM_VERSION: cached in $out" >&2
  echo "$helm"
  exit 0
fi

command -v go >/dev/null || { echo "go is required to build helm (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$out"
start=$(date +%s)
echo "building helm $HELM_VERSION into $out (first run only; a few minutes on 2 cores)" >&2

# What helm's own Makefile stamps: its version (`helm version`), and the
# Kubernetes version `helm template`/`helm lint` assume without a cluster
# (.Capabilities.KubeVersion), derived from the k8s.io/client-go it is built with.
pkg=helm.sh/helm/v3
gomod="$(cd "$out" && GOFLAGS= go mod download -json "$pkg@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
client_go="$(awk '$1 == "k8s.io/client-go" {print $2}' "$gomod")"   # v0.37.0
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean"
for p in "$pkg/pkg/lint/rules" "$pkg/pkg/chartutil"; do
  ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
done
# go install pkg@version builds in module mode from the module's own go.mod; -mod
# from the environment (the control plane's -mod=mod) does not apply to it.
(cd "$out" && GOBIN="$out" GOFLAGS=-buildvcs=false go install -trimpath -ldflags "$ldflags" "$pkg/cmd/helm@$HELM_VERSION")

echo "$want" > "$stamp"
echo "helm $HELM_VERSION built in $(( $(date +%s) - start ))s" >&2
echo "$helm"
