"""The seed Horovod job as `make demo-real` runs it: only the image and the script change."""

from __future__ import annotations

import yaml

from extender.devcluster.demo_real import SEED_JOB, real_node_job
from extender.devcluster.node_commands import JOB_IMAGE


def _seed() -> list[dict]:
    return [d for d in yaml.safe_load_all(SEED_JOB.read_text()) if d]


def _containers(doc: dict) -> list[dict]:
    if doc["kind"] == "Pod":
        return doc["spec"]["containers"]
    return doc["spec"]["template"]["spec"]["containers"]


def test_the_gang_its_resources_probe_and_wait_are_the_seed_jobs() -> None:
    seed, real = _seed(), real_node_job(_seed())
    assert [d["kind"] for d in real] == [d["kind"] for d in seed]
    assert real[0] == seed[0]  # the PodGroup
    for before, after in zip(seed[1:], real[1:], strict=True):
        assert after["metadata"] == before["metadata"]  # labels, depends-on annotation
        for old, new in zip(_containers(before), _containers(after), strict=True):
            assert new["resources"] == old["resources"]
            assert new.get("readinessProbe") == old.get("readinessProbe")
            assert new["ports"] == old["ports"]


def test_every_container_runs_the_local_image_without_pulling() -> None:
    for doc in real_node_job(_seed())[1:]:
        for container in _containers(doc):
            assert container["image"] == JOB_IMAGE
            assert container["imagePullPolicy"] == "IfNotPresent"


def test_the_master_runs_mpirun_over_the_injected_hostfile_and_the_workers_sshd() -> None:
    master, workers = real_node_job(_seed())[1:]
    script = _containers(master)[0]["command"][-1]
    assert "mpirun" in script and "--hostfile /etc/volcano/hostfile" in script
    assert "-np $GANG_NUM_SLOTS" in script
    assert "/usr/sbin/sshd -D" in _containers(workers)[0]["command"][-1]
