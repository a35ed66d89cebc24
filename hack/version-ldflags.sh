#!/usr/bin/env bash
# Prints the go -ldflags that stamp a Kubernetes version into binaries built from
# k8s.io modules (so `kube-apiserver --version` and the scheduler's report it).
#   hack/version-ldflags.sh v1.34.4
set -euo pipefail
version="${1:?usage: $0 v1.X.Y}"
minor="${version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
echo "$ldflags"
