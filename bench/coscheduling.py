"""scheduler-plugins' coscheduling scheduler on the local control plane (the bench's baseline).

Binary and CRD come from hack/build-scheduler-plugins.sh (built from the Go
module at the release matching the control plane, cached outside the checkout).
The KubeSchedulerConfiguration is the one that release ships in
manifests/coscheduling/, with only the kubeconfig and the profile's
schedulerName changed, so the baseline runs as its users deploy it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from bench.env import BenchEnv
from bench.objects import COSCHEDULING_SCHEDULER
from bench.schedmetrics import serving_flags
from bench.service import SCHEDULER_VERBOSITY
from extender.devcluster.process import ManagedProcess
from extender.devcluster.stack import apply_object, load_yaml_documents, wait_crd_established

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "hack" / "build-scheduler-plugins.sh"


def ensure_built() -> Path:
    """The scheduler-plugins output dir (bin/scheduler, manifests/coscheduling/), building it if needed."""
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True
    )
    return Path(done.stdout.strip().splitlines()[-1])


def install_crd(env: BenchEnv, root: Path) -> None:
    for doc in load_yaml_documents(root / "manifests" / "coscheduling" / "crd.yaml"):
        apply_object(env.stack.raw, doc)
        wait_crd_established(env.stack.raw, doc["metadata"]["name"])


def scheduler_config(env: BenchEnv, root: Path) -> Path:
    config: dict[str, Any] = yaml.safe_load(
        (root / "manifests" / "coscheduling" / "scheduler-config.yaml").read_text()
    )
    config["clientConnection"]["kubeconfig"] = str(env.cluster.kubeconfig)
    config["leaderElection"] = {"leaderElect": False}
    (profile,) = config["profiles"]
    profile["schedulerName"] = COSCHEDULING_SCHEDULER
    path = env.cluster.workdir / "coscheduling" / "scheduler-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def start(env: BenchEnv, root: Path, metrics_port: int) -> ManagedProcess:
    """The scheduler, serving its /metrics on `metrics_port` (bench/schedmetrics.py)."""
    argv = [
        str(root / "bin" / "scheduler"),
        f"--config={scheduler_config(env, root)}",
        *serving_flags(metrics_port),
        f"--v={SCHEDULER_VERBOSITY}",
    ]
    return env.cluster.start_process("coscheduling", argv)
