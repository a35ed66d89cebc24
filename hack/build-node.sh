#!/usr/bin/env bash
# Builds what a local *real* node needs (`gang-extender dev up --real-nodes N`,
# `make demo-real`, `make test-real`), into a cache outside the checkout so
# only the first run builds:
#
#   Debian packages   runc, containernetworking-plugins, debootstrap, umoci, iptables, ...
#   bin/kubelet       k8s.io/kubernetes/cmd/kubelet at the control plane's release
#   bin/fake-gpu-plugin, bin/pause   our own (hack/node-build/v1.37/cmd)
#   bin/dra-test-driver  the DRA kubelet plugin of the Kubernetes e2e tests
#                     (k8s.io/kubernetes/test/e2e/dra/test-driver at the same release),
#                     from its own wrapper module hack/node-build/dra-driver
#   bin/containerd, containerd-shim-runc-v2, ctr   containerd v2 from its Go module
#   bin/crictl        cri-tools, to stop and remove pod sandboxes on the way down
#   bin/coredns       CoreDNS with the plugins a node needs (its kubernetes plugin serves
#                     pod names), from its wrapper module hack/node-build/coredns
#   images/mpi.tar    Debian bookworm minbase + openssh-server, openmpi-bin, python3-mpi4py
#   images/pause.tar  bin/pause alone, imported as registry.k8s.io/pause:3.10
#
#   hack/build-node.sh            # build what is missing or stale, print the node dir
#   FORCE=1 hack/build-node.sh    # rebuild everything
#
# Needs root (apt-get, debootstrap, chroot) and Go. Each piece has its own stamp
# (<dir>/stamps/<piece>): a change to its inputs rebuilds that piece only.
#
# stdout: the node dir only. stderr: one line per step with its elapsed time; the
# Go, apt and debootstrap output goes to <dir>/build.log, whose tail and path are
# printed on failure.
set -euo pipefail

K8S_VERSION=v1.37.2
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.3.7}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
APT_PACKAGES=(runc containernetworking-plugins debootstrap umoci iptables iproute2 util-linux)
IMAGE_PACKAGES=openssh-server,openmpi-bin,python3-mpi4py,iproute2,procps

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wrapper="$here/node-build/v1.37"
cache_root="${GANG_EXTENDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang-extender}"
dir="$cache_root/node-$K8S_VERSION"
bin="$dir/bin"
images="$dir/images"
stamps="$dir/stamps"
log="$dir/build.log"
# shellcheck source=lib/lock.sh
source "$here/lib/lock.sh"
# shellcheck source=lib/go-compile.sh
source "$here/lib/go-compile.sh"
build_lock "$dir.lock"

[[ $(id -u) == 0 ]] || { echo "building a real node needs root (apt-get, debootstrap, chroot)" >&2; exit 1; }
command -v go >/dev/null || { echo "go is required to build the node binaries (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$bin" "$images" "$stamps"
[[ "${FORCE:-0}" == 1 ]] && rm -f "$stamps"/*
: > "$log"
start=$(date +%s)
built=0

# step "label" command...: one line on stderr a step; the output goes to "$log".
# shellcheck source=lib/steps.sh
source "$here/lib/steps.sh"

# fresh PIECE WANT FILE...: true when every FILE exists and the piece's stamp says WANT.
fresh() {
  local piece="$1" want="$2"; shift 2
  local f
  for f in "$@"; do [[ -e "$f" ]] || return 1; done
  [[ -f "$stamps/$piece" && "$(cat "$stamps/$piece")" == "$want" ]]
}
stamp() { echo "$2" > "$stamps/$1"; built=1; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# ---- Debian packages
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "installing real-node prerequisites into $dir (first run only; 5-10 min on 2 cores)" >&2
  step "apt-get update" apt-get update
  step "apt-get install ${missing[*]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
  built=1
fi

export GOFLAGS="-mod=readonly -buildvcs=false"
go_sources=("$wrapper/go.mod" "$wrapper/go.sum")

# ---- kubelet, the fake GPU device plugin and pause, from the wrapper module
want="$K8S_VERSION $(hash_of "${go_sources[@]}")"
if ! fresh kubelet "$want" "$bin/kubelet"; then
  ldflags="$("$here/version-ldflags.sh" "$K8S_VERSION")"
  (cd "$wrapper" && step "downloading Go modules" go mod download)
  (cd "$wrapper" && step "building kubelet $K8S_VERSION" \
    go build -trimpath -ldflags "$ldflags" -o "$bin/kubelet" k8s.io/kubernetes/cmd/kubelet)
  stamp kubelet "$want"
fi
# pause runs inside containers: static (no cgo). The device plugin is a host process
# built as kubelet is, so its client packages (grpc, the device plugin API) come from
# Go's build cache; with CGO_ENABLED=0 they and the standard library's net were
# compiled a second time (about 18 MB of Go source).
want="$(hash_of "${go_sources[@]}" "$wrapper/cmd/pause/main.go")"
if ! fresh pause "$want" "$bin/pause"; then
  (cd "$wrapper" && step "building pause" env CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$bin/pause" ./cmd/pause)
  stamp pause "$want"
fi
want="cgo-default $(hash_of "${go_sources[@]}" "$wrapper/cmd/fake-gpu-plugin/main.go")"
if ! fresh fake-gpu-plugin "$want" "$bin/fake-gpu-plugin"; then
  (cd "$wrapper" && step "building fake-gpu-plugin" \
    go build -trimpath -ldflags "-s -w" -o "$bin/fake-gpu-plugin" ./cmd/fake-gpu-plugin)
  stamp fake-gpu-plugin "$want"
fi

# ---- the DRA kubelet plugin (`dev up --real-gpus-by dra`): its own module and stamp,
# so that neither changes kubelet's. Built as kubelet is (cgo as Go's default, same
# flags): the packages they share (client-go, apimachinery, ...) come from Go's build
# cache once kubelet is built: 17 s of CPU, where CGO_ENABLED=0 recompiled them all
# (6 min of CPU).
dra_wrapper="$here/node-build/dra-driver"
want="$K8S_VERSION cgo-default $(hash_of "$dra_wrapper/go.mod" "$dra_wrapper/go.sum")"
if ! fresh dra-test-driver "$want" "$bin/dra-test-driver"; then
  (cd "$dra_wrapper" && step "building the DRA test driver" \
    nice -n 10 go build -trimpath -ldflags "-s -w" -o "$bin/dra-test-driver" \
    k8s.io/kubernetes/test/e2e/dra/test-driver)
  stamp dra-test-driver "$want"
fi

# ---- containerd v2 and crictl: each its own module, installed at its tag
if ! fresh containerd "$CONTAINERD_VERSION" "$bin/containerd" "$bin/containerd-shim-runc-v2" "$bin/ctr"; then
  step "building containerd $CONTAINERD_VERSION" env GOBIN="$bin" GOFLAGS=-buildvcs=false \
    go install -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w" \
    "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
  stamp containerd "$CONTAINERD_VERSION"
fi
if ! fresh crictl "$CRICTL_VERSION" "$bin/crictl"; then
  step "building crictl $CRICTL_VERSION" env GOBIN="$bin" GOFLAGS=-buildvcs=false \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  stamp crictl "$CRICTL_VERSION"
fi
# ---- CoreDNS: its own wrapper module whose main names the plugins compiled in (the
# stock build compiles all ~60, cloud DNS SDKs included: about 4x the CPU).
coredns_wrapper="$here/node-build/coredns"
coredns_version="$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$coredns_wrapper/go.mod")"
want="$coredns_version $(hash_of "$coredns_wrapper/go.mod" "$coredns_wrapper/go.sum" "$coredns_wrapper/main.go")"
if ! fresh coredns "$want" "$bin/coredns"; then
  (cd "$coredns_wrapper" && step "building coredns $coredns_version (the node's plugins)" \
    go build -trimpath -ldflags "-s -w" -o "$bin/coredns" .)
  stamp coredns "$want"
fi

# ---- images, as OCI archives for `ctr images import`
# pack_image NAME TAG ROOTFS ENTRYPOINT...: an OCI layout with one layer (ROOTFS),
# its reference named TAG, archived as images/NAME.tar (`ctr images import
# --base-name REPO` names it REPO:TAG).
pack_image() {
  local name="$1" tag="$2" rootfs="$3"; shift 3
  local work="$dir/image-work/$name"
  rm -rf "$work" && mkdir -p "$work"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$tag"
  umoci unpack --image "$work/oci:$tag" "$work/bundle"
  cp -a "$rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:$tag" "$work/bundle"
  local args=(--image "$work/oci:$tag" --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  local e
  for e in "$@"; do args+=(--config.entrypoint "$e"); done
  umoci config "${args[@]}"
  umoci gc --layout "$work/oci"
  tar -C "$work/oci" -cf "$images/$name.tar.tmp" .
  mv "$images/$name.tar.tmp" "$images/$name.tar"
  rm -rf "$work"
}

pause_image() {
  local root="$dir/pause-rootfs"
  rm -rf "$root" && mkdir -p "$root" && cp "$bin/pause" "$root/pause"
  pack_image pause 3.10 "$root" /pause
  rm -rf "$root"
}
want="$(hash_of "$bin/pause")"
if ! fresh pause-image "$want" "$images/pause.tar"; then
  step "packing the pause image" pause_image
  stamp pause-image "$want"
fi

# The job image: what the seed jobs run (sshd, mpirun, mpi4py). debootstrap's
# --include does not resolve virtual dependencies: apt-get -f install finishes.
mpi_rootfs() {
  local root="$dir/mpi-rootfs"
  rm -rf "$root"
  debootstrap --variant=minbase --include="$IMAGE_PACKAGES" "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR"
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get -f install -y --no-install-recommends
  chroot "$root" apt-get clean
  rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
  mkdir -p "$root/run/sshd"
}
want="$DEBIAN_SUITE $IMAGE_PACKAGES $(sed -n '/^mpi_rootfs()/,/^}/p' "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
if ! fresh mpi-image "$want" "$images/mpi.tar"; then
  step "debootstrap $DEBIAN_SUITE + ${IMAGE_PACKAGES//,/ }" mpi_rootfs
  step "packing the mpi image" pack_image mpi bookworm "$dir/mpi-rootfs" /bin/sh
  rm -rf "$dir/mpi-rootfs"
  stamp mpi-image "$want"
fi

elapsed=$(( $(date +%s) - start ))
if (( built )); then
  echo "$elapsed" > "$dir/.build-seconds"
  echo "real-node pieces built in $elapsed s (log: $log)" >&2
else
  echo "real-node pieces: cached in $dir" >&2
fi
echo "$dir"
