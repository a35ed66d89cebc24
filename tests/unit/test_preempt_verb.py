"""The preempt verb (kube-scheduler's preemptVerb, ProcessPreemption) on the wire.

ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims} in,
ExtenderPreemptionResult{NodeNameToMetaVictims} out, keys the Go field names;
pinned by golden files in tests/golden/extender/preempt-*.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from extender.api.extender import create_extender_app
from extender.coordinator import SchedulingCoordinator
from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.state.decisions import Effect, EvictVictims
from extender.metrics import Metrics
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core
from tests.golden_files import expected_golden
from tests.unit.test_extender_wire import RecordingBinder

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "extender"
T0 = 1_800_000_000.0


def running(name: str, node: str, group: str | None = None, priority: int = 0) -> dict[str, Any]:
    builder = make_pod(name).gpus(1).priority(priority).node(node).phase("Running")
    if group is not None:
        builder = builder.group(group)
    obj = builder.obj()
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


# n1: gang "a" (both members); n2: a plain pod; n3/n4: gang "b" split across them.
PODS = [
    running("a-0", "n1", "a"),
    running("a-1", "n1", "a"),
    running("p", "n2"),
    running("b-0", "n3", "b"),
    running("b-1", "n4", "b"),
]


def build(*, acting: bool = True) -> tuple[httpx.AsyncClient, GangCore, list[Effect]]:
    core = make_core()
    core.preemption_enabled = True
    for n in ("n1", "n2", "n3", "n4"):
        core.apply_node(NodeInfo.from_api(make_node(n).gpus(2).obj()))
    for name in ("a", "b"):
        core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup(name, 2), source="PodGroup"))
    for p in PODS:
        core.observe_pod(PodInfo.from_api(p), T0)
    core.drain_effects()
    sunk: list[Effect] = []
    coordinator = SchedulingCoordinator(
        core, RecordingBinder(), Metrics(), effect_sink=sunk.extend, clock=lambda: T0
    )
    app = create_extender_app(
        port=coordinator,
        metrics=Metrics(),
        max_request_bytes=1 << 20,
        acting=lambda: acting,
    )
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")
    return client, core, sunk


def plain_preemptor() -> dict[str, Any]:
    obj = make_pod("urgent").gpus(2).priority(1000).obj()
    obj["metadata"]["uid"] = "uid-urgent"
    return obj


def meta(*uids: str, pdb: int = 0) -> dict[str, Any]:
    return {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}


CASES = {
    # nodeCacheCapable: true (what deploy/ configures): victims as MetaPods.
    "preempt-meta-victims": {
        "Pod": plain_preemptor(),
        "NodeNameToMetaVictims": {
            "n1": meta("uid-a-0"),
            "n2": meta("uid-p", pdb=1),
            "n3": meta("uid-b-0"),
        },
    },
    # nodeCacheCapable: false: victims as whole Pods; NodeNameToMetaVictims null.
    "preempt-pod-victims": {
        "Pod": plain_preemptor(),
        "NodeNameToVictims": {"n3": {"Pods": [PODS[3]], "NumPDBViolations": 0}},
        "NodeNameToMetaVictims": None,
    },
}


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
async def test_preempt_wire_format_matches_golden(case: str) -> None:
    client, _, _ = build()
    request = CASES[case]
    async with client:
        response = await client.post("/preempt", json=request)
    assert response.status_code == 200
    actual = {"verb": "preempt", "request": request, "response": response.json()}
    expected = expected_golden(GOLDEN / f"{case}.json", actual)
    assert actual == expected


async def test_gang_victims_are_widened_and_a_split_gangs_node_dropped() -> None:
    client, _, _ = build()
    async with client:
        response = await client.post("/preempt", json=CASES["preempt-meta-victims"])
    got = response.json()["NodeNameToMetaVictims"]
    assert got == {"n1": meta("uid-a-0", "uid-a-1"), "n2": meta("uid-p", pdb=1)}


async def test_a_gang_member_gets_no_node_and_its_gang_is_tried_whole() -> None:
    client, core, sunk = build()
    high = [make_pod(f"h-{i}").group("h").gpus(2).priority(1000).obj() for i in range(2)]
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("h", 2), source="PodGroup"))
    for i, obj in enumerate(high):
        obj["metadata"]["uid"] = f"uid-h-{i}"
        core.observe_pod(PodInfo.from_api(obj), T0)
    async with client:
        response = await client.post(
            "/preempt",
            json={"Pod": high[0], "NodeNameToMetaVictims": {"n2": meta("uid-p")}},
        )
    assert response.json() == {"NodeNameToMetaVictims": {}}
    evicted = sorted(v.ref for e in sunk if isinstance(e, EvictVictims) for v in e.victims)
    # Two 2-GPU members: the plain pod p (fewest pods) frees n2 for one, gang a (whole)
    # frees n1 for the other; b, split over n3 and n4, is not needed.
    assert evicted == ["default/a-0", "default/a-1", "default/p"]


async def test_not_the_leader_preempts_nothing() -> None:
    client, _, sunk = build(acting=False)
    async with client:
        response = await client.post("/preempt", json=CASES["preempt-meta-victims"])
    assert response.status_code == 200
    assert response.json() == {"NodeNameToMetaVictims": {}}
    assert sunk == []


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        pytest.param(b"{not json", "not JSON", id="not-json"),
        pytest.param(b'{"NodeNameToMetaVictims": {}}', "Pod", id="no-pod"),
        pytest.param(
            b'{"Pod": {"metadata": {"name": "p", "uid": "u"}}, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": ""}]}}}',
            "UID",
            id="empty-uid",
        ),
        pytest.param(
            b'{"Pod": {"metadata": {"name": "p", "uid": "u"}}, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}}',
            "victim 0 has no metadata.uid",
            id="victim-pod-without-uid",
        ),
        pytest.param(
            b'{"Pod": {"metadata": {"name": "p", "uid": "u"}}, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": "x"}}}',
            "NumPDBViolations",
            id="pdb-count-not-a-number",
        ),
    ],
)
async def test_bad_input_is_a_400_that_names_the_field(body: bytes, needle: str) -> None:
    client, _, _ = build()
    async with client:
        response = await client.post(
            "/preempt", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert needle in response.json()["Error"]
