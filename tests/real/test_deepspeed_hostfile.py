"""The DeepSpeed example on real nodes: its `host slots=N` hostfile, handed to mpirun as it is."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.demo_jobs import DEEPSPEED_JOB, deepspeed_job
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import events
from tests.real.real_jobs import (
    apply_example,
    configmap_data,
    finished,
    logs,
    rank_host,
    rank_lines,
)

#: The session's 2 nodes x 2 GPUs hold 2 of the example's 2-GPU members: one on each.
MEMBERS = 2


def test_member_0_hands_the_injected_deepspeed_hostfile_to_mpirun_across_both_nodes(
    cluster: LocalCluster, raw: RawApi, namespace: str, tmp_path: Path
) -> None:
    docs = deepspeed_job(
        [d for d in yaml.safe_load_all(DEEPSPEED_JOB.read_text()) if d], members=MEMBERS
    )
    apply_example(cluster, namespace, docs, tmp_path / "deepspeed-job.yaml")
    launcher = finished(
        raw, namespace, "gang-extender.io/group=ds-llm,batch.kubernetes.io/job-completion-index=0"
    )
    out = logs(cluster, namespace, launcher["metadata"]["name"])
    assert launcher["status"]["phase"] == "Succeeded", out
    # The example's script cats the hostfile before launching: the file as the process read it.
    hostfile = [f"ds-llm-worker-{i}.ds-llm slots=2" for i in range(MEMBERS)]
    read = [line for line in out.splitlines() if line.endswith(" slots=2")]
    assert read == hostfile, out
    assert configmap_data(raw, namespace, "ds-llm")["hostfile"].splitlines() == hostfile
    # mpirun started slots=2 ranks on every host of the file; each summed all 4.
    ranks = rank_lines(out)
    assert len(ranks) == 2 * MEMBERS, out
    assert all(line.endswith("= 10") for line in ranks), out  # 1 + 2 + 3 + 4
    per_host = Counter(rank_host(line) for line in ranks)
    assert per_host == {f"ds-llm-worker-{i}": 2 for i in range(MEMBERS)}, out
    # Both real nodes: from the scheduler's Events, as the members past 0 stop with the Job.
    assigned = [e["message"] for e in events(raw, namespace, "Scheduled")]
    nodes = {message.rsplit(" to ", 1)[1] for message in assigned if "/ds-llm-" in message}
    assert len(nodes) == 2, assigned
