"""The extender's wire format (k8s.io/kube-scheduler/extender/v1), pinned by golden files.

Each tests/golden/extender/<case>.json holds {"verb", "request", "response"}.
Regenerate after a deliberate format change with UPDATE_GOLDEN=1.
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
from extender.metrics import Metrics
from extender.ports.binding import BindError
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core
from tests.golden_files import expected_golden

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "extender"
T0 = 1_800_000_000.0


class RecordingBinder:
    def __init__(self) -> None:
        self.bound: list[tuple[str, str, str]] = []
        self.fail_with: str | None = None

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        if self.fail_with:
            raise BindError(self.fail_with)
        self.bound.append((namespace, name, node))


def seed_pods() -> list[dict[str, Any]]:
    master = make_pod("job-master").group("job").task("master").cpu("500m").memory("1Gi").obj()
    workers = [
        make_pod(f"job-worker-{i}").group("job").task("worker").cpu("1").memory("2Gi").gpus(1).obj()
        for i in range(3)
    ]
    for i, pod in enumerate([master, *workers]):
        pod["metadata"]["uid"] = f"uid-{i}"
    return [master, *workers]


def build(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> tuple[httpx.AsyncClient, RecordingBinder, GangCore]:
    core = make_core()
    for n in nodes:
        core.apply_node(NodeInfo.from_api(n))
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), T0)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("job", 4), source="PodGroup"))
    binder = RecordingBinder()
    coordinator = SchedulingCoordinator(
        core, binder, Metrics(), effect_sink=lambda effects: None, clock=lambda: T0
    )
    app = create_extender_app(port=coordinator, metrics=Metrics(), max_request_bytes=1 << 20)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")
    return client, binder, core


SMALL = [make_node("n1").gpus(2).obj()]
ROOMY = [make_node("n1").gpus(2).obj(), make_node("n2").gpus(4).obj()]

CASES = {
    "filter-hold-node-names": (
        SMALL,
        1,
        "filter",
        lambda pods: {"Pod": pods[1], "NodeNames": ["n1"]},
    ),
    "filter-planned-node-names": (
        ROOMY,
        1,
        "filter",
        lambda pods: {"Pod": pods[1], "NodeNames": ["n1", "n2"]},
    ),
    "filter-planned-full-nodes": (
        ROOMY,
        1,
        "filter",
        lambda pods: {"Pod": pods[1], "Nodes": {"items": ROOMY}, "NodeNames": None},
    ),
    "filter-plain-pod": (
        ROOMY,
        None,
        "filter",
        lambda pods: {"Pod": make_pod("plain").gpus(1).obj(), "NodeNames": ["n1", "n2"]},
    ),
    "prioritize-plain-pod": (
        ROOMY,
        None,
        "prioritize",
        lambda pods: {"Pod": make_pod("plain").gpus(1).obj(), "NodeNames": ["n1", "n2"]},
    ),
    # The gang is planned by a filter first: its planned node scores, no other is named.
    "prioritize-planned-member": (
        ROOMY,
        1,
        "prioritize",
        lambda pods: {"Pod": pods[1], "NodeNames": ["n1", "n2"]},
    ),
    "bind-plain-pod": (
        ROOMY,
        None,
        "bind",
        lambda pods: {
            "PodName": "plain",
            "PodNamespace": "default",
            "PodUID": "uid-plain",
            "Node": "n2",
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
async def test_wire_format_matches_golden(case: str) -> None:
    nodes, member, verb, make_request = CASES[case]
    pods = seed_pods()
    client, _, core = build(nodes, pods)
    request = make_request(pods)
    async with client:
        if verb == "bind":  # a pod the watch delivered and this service filtered
            plain = make_pod("plain").gpus(1).obj()
            plain["metadata"]["uid"] = request["PodUID"]
            core.observe_pod(PodInfo.from_api(plain), T0)
            await client.post("/filter", json={"Pod": plain, "NodeNames": ["n1", "n2"]})
        if verb == "prioritize" and member is not None:  # plan the gang first
            await client.post("/filter", json=request)
        response = await client.post(f"/{verb}", json=request)
    assert response.status_code == 200
    path = GOLDEN / f"{case}.json"
    actual = {"verb": verb, "request": request, "response": response.json()}
    # A missing golden file fails the test; UPDATE_GOLDEN=1 writes it (tests/golden_files.py).
    expected = expected_golden(path, actual)
    assert actual["response"] == expected["response"]
    assert actual["request"] == expected["request"]


async def test_every_member_binds_only_after_the_last_reaches_bind() -> None:
    import asyncio

    pods = seed_pods()
    client, binder, core = build(ROOMY, pods)
    async with client:
        filtered = {}
        for pod in pods:
            r = await client.post("/filter", json={"Pod": pod, "NodeNames": ["n1", "n2"]})
            filtered[pod["metadata"]["name"]] = r.json()["NodeNames"]
        assert all(len(v) == 1 for v in filtered.values())

        def bind(pod: dict[str, Any]):
            name = pod["metadata"]["name"]
            return client.post(
                "/bind",
                json={
                    "PodName": name,
                    "PodNamespace": "default",
                    "PodUID": pod["metadata"]["uid"],
                    "Node": filtered[name][0],
                },
            )

        first_three = [asyncio.create_task(bind(p)) for p in pods[:3]]
        await asyncio.sleep(0.05)
        assert binder.bound == [], "nobody binds before the whole gang reached bind"
        last = await bind(pods[3])
        results = [await t for t in first_three] + [last]
    assert [r.json() for r in results] == [{"Error": ""}] * 4
    assert sorted(name for _, name, _ in binder.bound) == sorted(
        p["metadata"]["name"] for p in pods
    )


@pytest.mark.parametrize(
    ("verb", "body", "needle"),
    [
        pytest.param("filter", b"{not json", "not JSON", id="filter with a body that is not JSON"),
        pytest.param("filter", b"[]", "expected a JSON object", id="filter with a JSON list"),
        pytest.param("filter", b'{"NodeNames": ["n1"]}', "Pod", id="filter without Pod"),
        pytest.param(
            "filter",
            b'{"Pod": {"metadata": {}}, "NodeNames": ["n1"]}',
            "metadata.name",
            id="filter with a nameless pod",
        ),
        pytest.param(
            "prioritize",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "n1"}',
            "NodeNames",
            id="prioritize with NodeNames not a list",
        ),
        pytest.param(
            "bind", b'{"PodName": "p"}', "PodNamespace", id="bind without namespace, uid and node"
        ),
        pytest.param(
            "bind",
            b'{"PodName": "", "PodNamespace": "d", "PodUID": "u", "Node": "n"}',
            "PodName",
            id="bind with an empty pod name",
        ),
    ],
)
async def test_malformed_requests_get_400_with_a_message(
    verb: str, body: bytes, needle: str
) -> None:
    client, _, _ = build(ROOMY, seed_pods())
    async with client:
        response = await client.post(
            f"/{verb}", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        assert needle in response.json()["Error"]
        # The service is still up and answering.
        ok = await client.post(
            "/filter", json={"Pod": make_pod("plain").obj(), "NodeNames": ["n1"]}
        )
        assert ok.status_code == 200


async def test_oversized_request_is_refused_before_parsing() -> None:
    client, _, _ = build(ROOMY, seed_pods())
    huge = {"Pod": make_pod("plain").obj(), "NodeNames": [f"node-{i:07d}" for i in range(100_000)]}
    async with client:
        response = await client.post("/filter", json=huge)
    assert response.status_code == 400
    assert "exceeds" in response.json()["Error"]


async def test_unknown_node_names_are_passed_through_for_plain_pods_and_held_for_gangs() -> None:
    pods = seed_pods()
    client, _, _ = build(SMALL, pods)
    async with client:
        plain = await client.post(
            "/filter", json={"Pod": make_pod("plain").obj(), "NodeNames": ["ghost"]}
        )
        gang = await client.post("/filter", json={"Pod": pods[0], "NodeNames": ["ghost"]})
    assert plain.json()["NodeNames"] == ["ghost"]
    assert gang.json()["NodeNames"] == []
    assert "ghost" in gang.json()["FailedAndUnresolvableNodes"]


def nominated(pod: dict[str, Any], node: Any) -> dict[str, Any]:
    """The pod as kube-scheduler sends it once nominated on `node`."""
    return {**pod, "status": {"nominatedNodeName": node}}


async def test_a_pods_nomination_is_read_from_the_request_it_came_in() -> None:
    pods = seed_pods()
    client, _, core = build(ROOMY, pods)
    async with client:
        await client.post("/filter", json={"Pod": pods[1], "NodeNames": ["n1", "n2"]})
        (plan,) = core.ledger.plans.values()
        planned = plan.placements["uid-2"]
        other = next(n for n in ("n1", "n2") if n != planned)
        # Checked alone on its nominated planned node: planned there.
        alone = await client.post(
            "/filter", json={"Pod": nominated(pods[2], planned), "NodeNames": [planned]}
        )
        # A nomination left from elsewhere: refused, the plan kept for the full ask.
        stale = await client.post(
            "/filter", json={"Pod": nominated(pods[2], other), "NodeNames": [other]}
        )
        # The same one node without a nomination is kube-scheduler's word: the plan goes.
        word = await client.post("/filter", json={"Pod": pods[2], "NodeNames": [other]})
    assert alone.json()["NodeNames"] == [planned]
    assert stale.json()["NodeNames"] == []
    assert "nominated on " + other in stale.json()["FailedAndUnresolvableNodes"][other]
    assert word.json()["NodeNames"] == []
    assert not core.ledger.plans


async def test_failed_binding_is_reported_in_the_error_field() -> None:
    client, binder, core = build(ROOMY, seed_pods())
    plain = make_pod("plain").obj()
    plain["metadata"]["uid"] = "u"
    core.observe_pod(PodInfo.from_api(plain), T0)
    binder.fail_with = '404 NotFound: pods "plain" not found'
    async with client:
        await client.post("/filter", json={"Pod": plain, "NodeNames": ["n1"]})
        response = await client.post(
            "/bind",
            json={"PodName": "plain", "PodNamespace": "default", "PodUID": "u", "Node": "n1"},
        )
    assert response.status_code == 200
    assert "not found" in response.json()["Error"]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_the_same_candidates_sent_again_get_what_a_full_parse_answers(verb: str) -> None:
    # The second and later bodies end with the same names: only their pod is parsed
    # (api/candidates.py). A twin extender gets the same requests each ended by a
    # newline, which the memo never vouches for (each parsed whole): same state, so
    # the answers must be the same, a 400 for the bad pod included.
    import orjson

    pods = seed_pods()
    bad_pod = {"metadata": {"name": "", "uid": "u"}}
    bodies = [
        {"Pod": pods[1], "Nodes": None, "NodeNames": ["n1", "n2"]},
        {"Pod": pods[1], "Nodes": None, "NodeNames": ["n1", "n2"]},
        {"Pod": make_pod("plain").gpus(3).obj(), "Nodes": None, "NodeNames": ["n1", "n2"]},
        {"Pod": bad_pod, "Nodes": None, "NodeNames": ["n1", "n2"]},
        {"Pod": pods[2], "Nodes": None, "NodeNames": ["n1", "n2"]},
        {"Pod": pods[1], "Nodes": None, "NodeNames": ["n2"]},
    ]
    memo_client, _, _ = build(ROOMY, pods)
    whole_client, _, _ = build(ROOMY, pods)
    async with memo_client, whole_client:
        for body in bodies:
            raw = orjson.dumps(body)
            recalled = await memo_client.post(f"/{verb}", content=raw)
            parsed = await whole_client.post(f"/{verb}", content=raw + b"\n")
            assert (recalled.status_code, recalled.json()) == (
                parsed.status_code,
                parsed.json(),
            ), body
