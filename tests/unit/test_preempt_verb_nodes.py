"""The preempt verb's pure answer (domain/preemption/preemption.py, `gang_aware_victims`): each
node kube-scheduler proposes is judged on its own, so a node refused for a protected
gang does not cost the preemptor the other nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.preemption.preemption import NodeVictims, gang_aware_victims
from tests.builders import make_pod


def running(name: str, node: str, group: str | None = None, priority: int = 0) -> PodInfo:
    builder = make_pod(name).gpus(1).priority(priority).node(node).phase("Running")
    if group is not None:
        builder = builder.group(group)
    obj: dict[str, Any] = builder.obj()
    obj["metadata"]["uid"] = f"uid-{name}"
    return PodInfo.from_api(obj)


def preemptor() -> PodInfo:
    obj: dict[str, Any] = make_pod("urgent").gpus(1).priority(1000).obj()
    obj["metadata"]["uid"] = "uid-urgent"
    return PodInfo.from_api(obj)


PODS = [
    running("keep-0", "n1", "keep"),
    running("keep-1", "n1", "keep"),
    running("high-0", "n2", "high", priority=5000),
    running("plain", "n3"),
]
BY_UID = {p.uid: p for p in PODS}


def members_of(key: GroupKey) -> Sequence[PodInfo]:
    return [p for p in PODS if p.group == key]


def test_a_node_refused_for_a_protected_gang_leaves_the_next_nodes_answered() -> None:
    proposed = {
        "n1": NodeVictims(("uid-keep-0",)),
        "n2": NodeVictims(("uid-high-0",)),
        "n3": NodeVictims(("uid-plain",), pdb_violations=1),
    }
    answer = gang_aware_victims(
        preemptor(),
        proposed,
        BY_UID,
        members_of,
        preemptible=lambda key: key.name != "keep",
        disrupted_whole=lambda key: True,
    )
    assert answer.nodes == {"n3": NodeVictims(("uid-plain",), pdb_violations=1)}
    assert set(answer.dropped) == {"n1", "n2"}
    assert "opted out of preemption" in answer.dropped["n1"]
    assert "has priority 5000, not lower than 1000" in answer.dropped["n2"]
