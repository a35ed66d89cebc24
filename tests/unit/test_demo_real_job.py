"""The example jobs as `make demo-real` runs them: only the image and the program change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extender.cli import REAL_DEMO_JOBS
from extender.devcluster.demo_jobs import (
    ALLREDUCE_COMMAND,
    DEEPSPEED_CPU,
    DEEPSPEED_JOB,
    DEEPSPEED_MEMORY,
    JOB_KEYS,
    JOBS,
    MPI_JOB,
    SEED_JOB,
    ExampleChanged,
    deepspeed_job,
    horovod_job,
    mpi_job,
)
from extender.devcluster.node_commands import JOB_IMAGE


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _containers(doc: dict) -> list[dict]:
    if doc["kind"] == "Pod":
        return doc["spec"]["containers"]
    return doc["spec"]["template"]["spec"]["containers"]


def _script(doc: dict) -> str:
    return _containers(doc)[0]["command"][-1]


def _by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def test_the_gang_its_resources_probe_and_wait_are_the_seed_jobs() -> None:
    seed, real = _docs(SEED_JOB), horovod_job(_docs(SEED_JOB))
    assert [d["kind"] for d in real] == [d["kind"] for d in seed]
    assert real[0] == seed[0]  # the PodGroup
    for before, after in zip(seed[1:], real[1:], strict=True):
        assert after["metadata"] == before["metadata"]  # labels, depends-on annotation
        for old, new in zip(_containers(before), _containers(after), strict=True):
            assert new["resources"] == old["resources"]
            assert new.get("readinessProbe") == old.get("readinessProbe")
            assert new["ports"] == old["ports"]


@pytest.mark.parametrize("job", JOBS, ids=JOB_KEYS)
def test_every_container_runs_the_local_image_without_pulling(job) -> None:
    for doc in job.transform(_docs(job.example)):
        if doc["kind"] in ("PodGroup",):
            continue
        for container in _containers(doc):
            assert container["image"] == JOB_IMAGE
            assert container["imagePullPolicy"] == "IfNotPresent"


def test_the_master_runs_mpirun_over_the_injected_hostfile_and_the_workers_sshd() -> None:
    master, workers = horovod_job(_docs(SEED_JOB))[1:]
    script = _script(master)
    assert "mpirun" in script and "--hostfile /etc/volcano/hostfile" in script
    assert "-np $GANG_NUM_SLOTS" in script
    assert "/usr/sbin/sshd -D" in _script(workers)


def test_deepspeed_keeps_the_examples_script_up_to_its_launch_line_then_mpirun() -> None:
    example, real = _by_kind(_docs(DEEPSPEED_JOB)), _by_kind(deepspeed_job(_docs(DEEPSPEED_JOB)))
    before, after = _script(example["Job"]), _script(real["Job"])
    kept = before[: before.index("exec deepspeed")]
    assert after.startswith(kept)  # sshd, the wait for every member, cat of the hostfile
    assert "sh /etc/volcano/wait_for_tasks.sh worker" in kept
    launch = after[len(kept) :]
    assert launch.startswith("exec mpirun ") and "-hostfile /etc/volcano/hostfile" in launch
    assert '-n "$GANG_NUM_SLOTS"' in launch and "deepspeed" not in launch
    assert real["PodGroup"] == example["PodGroup"]
    assert real["Job"]["metadata"] == example["Job"]["metadata"]
    assert real["Job"]["spec"]["completions"] == example["Job"]["spec"]["completions"]
    resources = _containers(real["Job"])[0]["resources"]
    for bound in ("requests", "limits"):
        assert resources[bound] == {
            "cpu": DEEPSPEED_CPU,
            "memory": DEEPSPEED_MEMORY,
            "nvidia.com/gpu": 2,  # the example's GPUs: what the hostfile's slots=2 counts
        }


def test_deepspeed_resized_resizes_the_podgroup_and_the_job_together() -> None:
    real = _by_kind(deepspeed_job(_docs(DEEPSPEED_JOB), members=2))
    assert real["PodGroup"]["spec"]["minMember"] == 2
    assert real["PodGroup"]["spec"]["minTaskMember"] == {"worker": 2}
    assert real["Job"]["spec"]["completions"] == real["Job"]["spec"]["parallelism"] == 2


def test_the_mpi_examples_launcher_keeps_its_mpirun_line_with_the_allreduce() -> None:
    example, real = _by_kind(_docs(MPI_JOB)), _by_kind(mpi_job(_docs(MPI_JOB)))
    before, after = _script(example["Job"]), _script(real["Job"])
    assert after == before.replace("/opt/pi", ALLREDUCE_COMMAND)
    assert '--host "$VC_WORKER_HOSTS"' in after
    assert real["PodGroup"] == example["PodGroup"]
    assert _script(real["StatefulSet"]) == _script(example["StatefulSet"])
    for kind in ("StatefulSet", "Job"):
        assert (
            real[kind]["spec"]["template"]["metadata"]
            == (example[kind]["spec"]["template"]["metadata"])
        )


def test_an_example_without_the_swapped_line_is_refused_not_run_half_swapped() -> None:
    docs = _docs(MPI_JOB)
    _containers(_by_kind(docs)["Job"])[0]["command"][-1] = "mpirun /opt/other"
    with pytest.raises(ExampleChanged, match="/opt/pi"):
        mpi_job(docs)
    docs = _docs(DEEPSPEED_JOB)
    _containers(_by_kind(docs)["Job"])[0]["command"][-1] = "torchrun train.py"
    with pytest.raises(ExampleChanged, match="deepspeed"):
        deepspeed_job(docs)


def test_the_cli_offers_exactly_the_demo_jobs() -> None:
    assert REAL_DEMO_JOBS == JOB_KEYS
