"""The control-plane binaries: where they are, which release, and building them once.

`ensure_binaries` finds them ($GANG_E2E_BIN_DIR) or runs hack/build-control-plane.sh,
a no-op when its cache is current.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from extender.devcluster.loopback import ClusterError
from extender.devcluster.process import run_build_script

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "build-control-plane.sh"
REQUIRED_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)
BIN_DIR_ENV = "GANG_E2E_BIN_DIR"
# The Kubernetes release to build and run (e.g. v1.35.4); unset means the build
# script's default. Every release has its wrapper module in hack/k8s-build/v1.<minor>/.
VERSION_ENV = "K8S_VERSION"
_VERSION = re.compile(r"\bv1\.\d+\.\d+\b")


def missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in REQUIRED_BINARIES if not os.access(bin_dir / b, os.X_OK)]


def binary_version(bin_dir: Path) -> str:
    """The Kubernetes release the binaries in ``bin_dir`` were built at (``v1.37.2``)."""
    try:
        out = subprocess.run(
            [str(bin_dir / "kube-apiserver"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"cannot run {bin_dir / 'kube-apiserver'} --version: {exc}") from exc
    found = _VERSION.search(out)
    if found is None:
        raise ClusterError(f"{bin_dir / 'kube-apiserver'} --version printed no version: {out!r}")
    return found.group(0)


def ensure_binaries(*, force: bool = False, version: str | None = None) -> Path:
    """Return the directory holding the control-plane binaries, building them if needed.

    ``version`` (default ``$K8S_VERSION``, else the build script's default
    release) picks the Kubernetes release; each one has its own cache directory.
    ``$GANG_E2E_BIN_DIR``, when set, names a prebuilt directory and skips the
    build; if a version was asked for too, the binaries must be that version.
    Otherwise runs ``hack/build-control-plane.sh`` (a no-op when the cache
    is current; 12-40 minutes the first time) and returns the bin dir it prints
    last. Build progress (one line per step) goes to our stderr.
    """
    version = version or os.environ.get(VERSION_ENV) or None
    override = os.environ.get(BIN_DIR_ENV)
    if override and not force:
        bin_dir = Path(override).expanduser().resolve()
        missing = missing_binaries(bin_dir)
        if missing:
            raise ClusterError(f"${BIN_DIR_ENV}={override} lacks: {', '.join(missing)}")
        if version is not None and (found := binary_version(bin_dir)) != version:
            raise ClusterError(
                f"${BIN_DIR_ENV}={override} holds Kubernetes {found}, not the {version} asked for"
            )
        return bin_dir

    env = dict(os.environ)
    if force:
        env["FORCE"] = "1"
    try:
        run = run_build_script(
            ["bash", str(BUILD_SCRIPT), *([version] if version else [])],
            env=env,
            name="build-control-plane",
        )
    except OSError as exc:
        raise ClusterError(f"cannot run {BUILD_SCRIPT}: {exc}") from exc
    if run.code != 0:
        raise ClusterError(
            f"{BUILD_SCRIPT} failed with exit code {run.code}; last stderr lines:\n"
            + run.stderr_tail
        )
    if run.last_line is None:
        raise ClusterError(f"{BUILD_SCRIPT} printed no bin dir; stderr:\n" + run.stderr_tail)
    bin_dir = Path(run.last_line)
    missing = missing_binaries(bin_dir)
    if missing:
        raise ClusterError(f"{BUILD_SCRIPT} succeeded but {bin_dir} lacks: {', '.join(missing)}")
    return bin_dir
