# Sourced by the hack/build-*.sh scripts: how their `go build`s use the CPU.
#
# GOGC=400 for the compiler and linker: they allocate a lot and the machines that
# build here have memory to spare, so collecting less often saves CPU on a build
# that is CPU-bound. Measured on the 2-core VM (CoreDNS from an empty build cache,
# both settings at once): 395 s of CPU at Go's default 100, 349 s at 400 (-12%);
# peak memory 0.81 -> 0.91 GB per compile, kube-apiserver's link 2.4 -> 2.6 GB.
# A GOGC already set in the environment wins.
export GOGC="${GOGC:-400}"
