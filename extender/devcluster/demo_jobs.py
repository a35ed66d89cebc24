"""The example jobs as `make demo-real` runs them on real nodes: what is swapped, as data.

Pure: no I/O. Each example in examples/ is applied as written except for what
this machine cannot have: the image (the locally built
``localhost/gang-mpi:bookworm``: sshd, Open MPI, mpi4py; no registry is
reachable), the training program (an mpi4py allreduce: no deepspeed, torch or
TensorFlow here) and, for DeepSpeed, the CPU and memory requests (8 CPUs and
64Gi per member do not fit a 2-core machine; the GPUs stay). The PodGroups,
labels, annotations, hostnames, probes, waits and every launcher's use of the
injected files are the examples' own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extender.devcluster.node_commands import JOB_IMAGE
from extender.devcluster.stack import REPO

EXAMPLES = REPO / "examples"
SEED_JOB = EXAMPLES / "horovod" / "horovod-job.yaml"
DEEPSPEED_JOB = EXAMPLES / "deepspeed" / "deepspeed-job.yaml"
MPI_JOB = EXAMPLES / "mpijob" / "mpijob.yaml"

#: Every rank adds rank + 1: with n ranks the allreduce is n (n + 1) / 2. One line, so
#: mpirun hands it to every rank as an argument (no file to copy to the workers). Each
#: rank's line is one write(2): under `python -u` (DeepSpeed's runners use it) print()
#: writes the text and its newline apart, and two ranks of one host interleave.
ALLREDUCE = (
    "import os, socket; from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "s = c.allreduce(c.rank + 1); "
    "os.write(1, f'rank {c.rank} of {c.size} on {socket.gethostname()}: "
    "allreduce(rank + 1) = {s}\\n'.encode())"
)
ALLREDUCE_COMMAND = f'python3 -c "{ALLREDUCE}"'

#: Open MPI over the pod network only (eth0; lo must be up but carries no ranks' traffic).
MPIRUN = (
    "mpirun --allow-run-as-root --hostfile /etc/volcano/hostfile -np $GANG_NUM_SLOTS"
    " --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"
    f" {ALLREDUCE_COMMAND}"
)
#: What `deepspeed --hostfile H --launcher openmpi` runs (DeepSpeed's OpenMPIRunner:
#: ``mpirun -n <sum of slots> -hostfile H --mca btl ^openib --mca btl_tcp_if_include
#: eth0 <launcher_args> <program>``): the hostfile handed to mpirun as it is. The
#: launcher_args a container needs: run as root, Open MPI's own wire on eth0 too.
DEEPSPEED_MPIRUN = (
    'exec mpirun -n "$GANG_NUM_SLOTS" -hostfile /etc/volcano/hostfile'
    " --mca btl ^openib --mca btl_tcp_if_include eth0"
    " --allow-run-as-root --mca oob_tcp_if_include eth0"
    f' python3 -u -c "{ALLREDUCE}"\n'
)
#: The example's own launch line, replaced from here to the end of its script.
DEEPSPEED_LAUNCH = "exec deepspeed --hostfile /etc/volcano/hostfile"
#: The MPI example's program, replaced by the allreduce in the same mpirun line.
MPI_PROGRAM = "/opt/pi"
#: What a DeepSpeed member asks besides its GPUs on a 2-core machine.
DEEPSPEED_CPU = "250m"
DEEPSPEED_MEMORY = "512Mi"

Doc = dict[str, Any]


class ExampleChanged(ValueError):
    """An example no longer has the line the demo swaps: update this module with it."""


@dataclass(frozen=True)
class DemoJob:
    """One example, how to run it on real nodes and how to find its launcher."""

    key: str
    title: str
    example: Path
    group: str
    #: label selector of the group's members (ours, or scheduler-plugins')
    members: str
    #: label selector of the one pod whose log has the ranks' lines
    launcher: str
    #: what is swapped, for the transcript
    swapped: str
    transform: Callable[[list[Doc]], list[Doc]]


def _makes_pods(doc: Doc) -> bool:
    return doc.get("kind") in ("Pod", "Deployment", "StatefulSet", "Job")


def _pod_labels(doc: Doc) -> dict[str, str]:
    if doc.get("kind") == "Pod":
        return dict(doc["metadata"].get("labels") or {})
    return dict(doc["spec"]["template"]["metadata"].get("labels") or {})


def _containers(doc: Doc) -> list[Doc]:
    spec = doc["spec"] if doc.get("kind") == "Pod" else doc["spec"]["template"]["spec"]
    containers: list[Doc] = spec["containers"]
    return containers


def _local_image(docs: list[Doc]) -> list[Doc]:
    out = copy.deepcopy(docs)
    for doc in out:
        if not _makes_pods(doc):
            continue
        for container in _containers(doc):
            container["image"] = JOB_IMAGE
            container["imagePullPolicy"] = "IfNotPresent"
    return out


def horovod_job(docs: list[Doc]) -> list[Doc]:
    """The seed job: the master's mpirun runs the allreduce over the hostfile; workers sshd."""
    out = _local_image(docs)
    for doc in out:
        if not _makes_pods(doc):
            continue
        if _pod_labels(doc).get("gang-extender.io/task") == "master":
            script = (
                "mkdir -p /run/sshd; /usr/sbin/sshd -e; "
                f"echo '== /etc/volcano/hostfile'; cat /etc/volcano/hostfile; {MPIRUN}"
            )
        else:
            script = "mkdir -p /run/sshd; exec /usr/sbin/sshd -D -e"
        for container in _containers(doc):
            container["command"] = ["/bin/sh", "-c", script]
    return out


def deepspeed_job(docs: list[Doc], *, members: int | None = None) -> list[Doc]:
    """The DeepSpeed example: its script up to the launch line, then DeepSpeed's mpirun.

    ``members``: fewer members than the example's 4 (the PodGroup and the Job
    resized together), for a cluster with fewer GPUs.
    """
    out = _local_image(docs)
    for doc in out:
        if doc.get("kind") == "PodGroup" and members is not None:
            doc["spec"]["minMember"] = members
            doc["spec"]["minTaskMember"] = {"worker": members}
        if doc.get("kind") != "Job":
            continue
        if members is not None:
            doc["spec"]["completions"] = members
            doc["spec"]["parallelism"] = members
        for container in _containers(doc):
            script = container["command"][-1]
            at = script.find(DEEPSPEED_LAUNCH)
            if at < 0:
                raise ExampleChanged(f"{DEEPSPEED_JOB.name} no longer runs {DEEPSPEED_LAUNCH!r}")
            container["command"][-1] = script[:at] + DEEPSPEED_MPIRUN
            for bound in ("requests", "limits"):
                container["resources"][bound].update(cpu=DEEPSPEED_CPU, memory=DEEPSPEED_MEMORY)
    return out


def mpi_job(docs: list[Doc]) -> list[Doc]:
    """The MPI example: the launcher's mpirun line as written, running the allreduce."""
    out = _local_image(docs)
    for doc in out:
        if doc.get("kind") != "Job":
            continue
        for container in _containers(doc):
            script = container["command"][-1]
            if MPI_PROGRAM not in script:
                raise ExampleChanged(f"{MPI_JOB.name}'s launcher no longer runs {MPI_PROGRAM}")
            container["command"][-1] = script.replace(MPI_PROGRAM, ALLREDUCE_COMMAND)
    return out


JOBS = (
    DemoJob(
        key="horovod",
        title="the seed Horovod job (master + 3 workers, 1 GPU each)",
        example=SEED_JOB,
        group="lm-horovod-job",
        members="gang-extender.io/group=lm-horovod-job",
        launcher="gang-extender.io/task=master",
        swapped="training script: an mpi4py allreduce over /etc/volcano/hostfile",
        transform=horovod_job,
    ),
    DemoJob(
        key="deepspeed",
        title="the DeepSpeed example (Indexed Job, 4 workers x 2 GPUs, hostfile `host slots=2`)",
        example=DEEPSPEED_JOB,
        group="ds-llm",
        members="gang-extender.io/group=ds-llm",
        launcher="batch.kubernetes.io/job-completion-index=0",
        swapped=(
            "`deepspeed --launcher openmpi`'s mpirun over /etc/volcano/hostfile as it is, "
            f"running the allreduce; {DEEPSPEED_CPU} CPU and {DEEPSPEED_MEMORY} per member"
        ),
        transform=deepspeed_job,
    ),
    DemoJob(
        key="mpijob",
        title="the MPI example (scheduler-plugins PodGroup, launcher Job + 2 workers)",
        example=MPI_JOB,
        group="pi",
        members="scheduling.x-k8s.io/pod-group=pi",
        launcher="gang-extender.io/task=launcher",
        swapped=f"program {MPI_PROGRAM}: the allreduce, in the launcher's own mpirun line",
        transform=mpi_job,
    ),
)
JOB_KEYS = tuple(job.key for job in JOBS)
