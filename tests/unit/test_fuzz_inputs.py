"""Fuzz (hypothesis): whatever arrives on the wire or from the watch, nothing crashes.

Every route (`/filter`, `/prioritize`, `/bind`, `/mutate`) with generated bodies and
generated Pod/Node objects: never a 500, never an exception out of a handler, and
the extender's last-resort catch ("internal error") never needed, i.e. every bad
input is answered on purpose. The watch cache's sink (`ClusterState.on_page` /
`on_event`) with generated objects mixed into good ones: no exception, and every
good object is applied.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.admitter import Admitter
from extender.api.extender import create_extender_app
from extender.api.webhook import create_webhook_app
from extender.controller.cluster_state import ClusterState
from extender.coordinator import SchedulingCoordinator
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo
from extender.metrics import Metrics
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core
from tests.unit.test_admitter import FakeAllocator
from tests.unit.test_extender_wire import RecordingBinder

FUZZ = settings(
    max_examples=int(os.environ.get("GANG_FUZZ_EXAMPLES", "150")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---- generated values ----

QUANTITIES = st.one_of(
    st.sampled_from(
        [
            "1e1000000",
            "-1e1000000",
            "1e-1000000",
            "NaN",
            "nan",
            "Infinity",
            "-Infinity",
            "inf",
            "-1",
            "-500m",
            "",
            " ",
            "1Ei",
            "8Ei",
            "9223372036854775807",
            "9223372036854775808",
            "1.5.5",
            "1Gi",
            "500m",
            "4",
            "0x10",
            "1e3",
            "1E18",
            "1e19",
            "\u0661",  # an Arabic-Indic digit one: Decimal reads it
        ]
    ),
    st.text(max_size=12),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=16),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

RESOURCE_NAMES = st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "pods", "x"]) | st.text(
    max_size=6
)
NAMES = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12)


def _put(obj: dict[str, Any], path: list[str | int], value: Any) -> None:
    target: Any = obj
    for step in path[:-1]:
        if isinstance(target, dict):
            target = target.setdefault(step, {})
        elif isinstance(target, list) and isinstance(step, int) and step < len(target):
            target = target[step]
        else:
            return
    last = path[-1]
    if isinstance(target, dict) or (
        isinstance(target, list) and isinstance(last, int) and last < len(target)
    ):
        target[last] = value


POD_PATHS: list[list[str | int]] = [
    ["metadata"],
    ["metadata", "name"],
    ["metadata", "uid"],
    ["metadata", "namespace"],
    ["metadata", "labels"],
    ["metadata", "labels", "gang-extender.io/group"],
    ["metadata", "annotations"],
    ["metadata", "annotations", "gang-extender.io/min-available"],
    ["metadata", "annotations", "gang-extender.io/planned-node"],
    ["metadata", "annotations", "gang-extender.io/task-index"],
    ["metadata", "creationTimestamp"],
    ["metadata", "deletionTimestamp"],
    ["spec"],
    ["spec", "containers"],
    ["spec", "containers", 0],
    ["spec", "containers", 0, "resources"],
    ["spec", "containers", 0, "resources", "requests"],
    ["spec", "initContainers"],
    ["spec", "overhead"],
    ["spec", "nodeName"],
    ["spec", "schedulerName"],
    ["spec", "nodeSelector"],
    ["spec", "tolerations"],
    ["status"],
    ["status", "phase"],
]


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """A gang member or plain pod, with poisoned quantities and fields of any JSON type."""
    name = draw(NAMES)
    builder = make_pod(name)
    if draw(st.booleans()):
        builder = builder.group(draw(st.sampled_from(["job", "other"])))
        builder = builder.min_available(draw(st.integers(min_value=1, max_value=3)))
    pod = builder.gpus(draw(st.integers(min_value=0, max_value=4))).obj()
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        requests[draw(RESOURCE_NAMES)] = draw(QUANTITIES)
    if draw(st.booleans()):
        pod["spec"]["initContainers"] = [
            {"name": "init", "resources": {"limits": {draw(RESOURCE_NAMES): draw(QUANTITIES)}}}
        ]
    if draw(st.booleans()):
        pod["spec"]["overhead"] = {draw(RESOURCE_NAMES): draw(QUANTITIES)}
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        _put(pod, draw(st.sampled_from(POD_PATHS)), draw(JSON))
    return pod


NODE_PATHS: list[list[str | int]] = [
    ["metadata"],
    ["metadata", "name"],
    ["metadata", "labels"],
    ["spec"],
    ["spec", "taints"],
    ["spec", "unschedulable"],
    ["status"],
    ["status", "allocatable"],
    ["status", "capacity"],
]


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    node = make_node(draw(st.sampled_from(["n1", "n2", "n3"]))).obj()
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        node["status"]["allocatable"][draw(RESOURCE_NAMES)] = draw(QUANTITIES)
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        _put(node, draw(st.sampled_from(NODE_PATHS)), draw(JSON))
    return node


def extender_args(pod: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.lists(st.sampled_from(["n1", "n2", "n3"]) | st.text(max_size=4), max_size=4)
    return st.one_of(
        st.fixed_dictionaries({"Pod": pod, "NodeNames": names}),
        st.fixed_dictionaries(
            {
                "Pod": pod,
                "Nodes": st.fixed_dictionaries({"items": st.lists(nodes() | JSON, max_size=3)}),
            }
        ),
        st.fixed_dictionaries({"Pod": pod, "Nodes": JSON, "NodeNames": JSON}),
        JSON,
    )


BIND_ARGS = st.one_of(
    st.fixed_dictionaries(
        {
            "PodName": NAMES | JSON,
            "PodNamespace": st.just("default") | JSON,
            "PodUID": st.sampled_from(["uid-default-w0", "uid-default-w1"]) | JSON,
            "Node": st.sampled_from(["n1", "n2"]) | JSON,
        }
    ),
    JSON,
)


# ---- the apps under test ----


def _extender_client() -> tuple[TestClient, GangCore]:
    # A barrier that opens or fails at once: a generated bind may join a plan.
    core = make_core(timeouts=Timeouts(60, 0.01, 0))
    for node in (make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()):
        core.apply_node(NodeInfo.from_api(node))
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("job", 2), source="PodGroup"))
    coordinator = SchedulingCoordinator(
        core, RecordingBinder(), Metrics(), effect_sink=lambda effects: None
    )
    app = create_extender_app(port=coordinator, metrics=Metrics(), max_request_bytes=1 << 20)
    return TestClient(app, raise_server_exceptions=True), core


EXTENDER, CORE = _extender_client()
WEBHOOK = TestClient(
    create_webhook_app(admitter=Admitter(FakeAllocator())), raise_server_exceptions=True
)


def _answered_on_purpose(response: Any) -> None:
    assert response.status_code in (200, 400), (response.status_code, response.text)
    body = response.json()
    if response.status_code == 400 or isinstance(body, dict):
        error = body.get("Error", body.get("error", "")) if isinstance(body, dict) else ""
        assert "internal error" not in str(error), error


@FUZZ
@given(verb=st.sampled_from(["filter", "prioritize"]), body=extender_args(pods() | JSON))
def test_filter_and_prioritize_never_fail_on_generated_input(verb: str, body: Any) -> None:
    _answered_on_purpose(EXTENDER.post(f"/{verb}", json=body))


@FUZZ
@given(body=BIND_ARGS)
def test_bind_never_fails_on_generated_input(body: Any) -> None:
    _answered_on_purpose(EXTENDER.post("/bind", json=body))


@FUZZ
@given(raw=st.binary(max_size=64))
def test_every_route_survives_a_body_that_is_not_json(raw: bytes) -> None:
    for route in ("/filter", "/prioritize", "/bind"):
        _answered_on_purpose(
            EXTENDER.post(route, content=raw, headers={"content-type": "application/json"})
        )
    response = WEBHOOK.post("/mutate", content=raw, headers={"content-type": "application/json"})
    assert response.status_code in (200, 400)


def _review(pod: Any, draw_request: dict[str, Any]) -> dict[str, Any]:
    request = {
        "uid": "u1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": "default",
        "object": pod,
    }
    request.update(draw_request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@FUZZ
@given(
    pod=pods() | JSON,
    extra=st.dictionaries(
        st.sampled_from(["uid", "operation", "namespace", "dryRun", "subResource", "kind"]),
        JSON,
        max_size=2,
    ),
    whole=st.booleans(),
    garbage=JSON,
)
def test_mutate_never_fails_on_generated_input(
    pod: Any, extra: dict[str, Any], whole: bool, garbage: Any
) -> None:
    body = _review(pod, extra) if whole else garbage
    response = WEBHOOK.post("/mutate", json=body)
    assert response.status_code in (200, 400), (response.status_code, response.text)


# ---- the watch cache's sink ----


def _good_pod(i: int) -> dict[str, Any]:
    return make_pod(f"good-{i}").group("job").gpus(1).obj()


def _good_node(i: int) -> dict[str, Any]:
    return make_node(f"good-n{i}").gpus(4).obj()


def _not_good(obj: Any) -> bool:
    """Garbage never impersonates a good object (which would rightly replace it)."""
    text = repr(obj)
    return "good-" not in text


GARBAGE_PODS = (pods() | JSON).filter(_not_good)
GARBAGE_NODES = (nodes() | JSON).filter(_not_good)


@FUZZ
@given(
    bad_pods=st.lists(GARBAGE_PODS, max_size=4),
    bad_nodes=st.lists(GARBAGE_NODES, max_size=4),
    seed=st.randoms(use_true_random=False),
)
def test_a_list_page_applies_every_good_object_whatever_else_it_holds(
    bad_pods: list[Any], bad_nodes: list[Any], seed: Any
) -> None:
    core = make_core()
    state = ClusterState(core, flush_effects=lambda: None, metrics=Metrics())
    pod_page = [_good_pod(i) for i in range(3)] + copy.deepcopy(bad_pods)
    node_page = [_good_node(i) for i in range(2)] + copy.deepcopy(bad_nodes)
    seed.shuffle(pod_page)
    seed.shuffle(node_page)
    state.on_page("nodes", node_page, True, True)
    state.on_page("pods", pod_page, True, True)
    state.on_page("namespaces", [*bad_pods, {"metadata": {"name": "good-ns"}}], True, True)
    state.on_page("podgroups", [*bad_nodes, make_podgroup("good-pg", 2)], True, True)
    assert {f"good-n{i}" for i in range(2)} <= set(core.snapshot.nodes)
    assert {f"uid-default-good-{i}" for i in range(3)} <= set(core.snapshot.pods)
    assert "good-ns" in state.namespace_labels
    assert core.snapshot.podgroup(make_key("good-pg")) is not None


@FUZZ
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["pods", "nodes", "podgroups", "namespaces"]),
            st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
            GARBAGE_PODS | GARBAGE_NODES,
        ),
        max_size=6,
    )
)
def test_watch_events_with_generated_objects_never_crash_nor_lose_good_objects(
    events: list[tuple[str, str, Any]],
) -> None:
    core = make_core()
    state = ClusterState(core, flush_effects=lambda: None, metrics=Metrics())
    state.on_page("pods", [_good_pod(0)], True, True)
    state.on_page("nodes", [_good_node(0)], True, True)
    for kind, event_type, obj in events:
        state.on_event(kind, event_type, copy.deepcopy(obj))
    state.on_event("pods", "ADDED", _good_pod(1))
    assert {"uid-default-good-0", "uid-default-good-1"} <= set(core.snapshot.pods)
    assert "good-n0" in core.snapshot.nodes


def make_key(name: str) -> GroupKey:
    return GroupKey("default", name)


def test_the_poisoned_quantity_of_the_issue_is_a_400_naming_the_field() -> None:
    pod = make_pod("w0").group("job").obj()
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1e1000000"
    for verb in ("filter", "prioritize"):
        response = EXTENDER.post(f"/{verb}", json={"Pod": pod, "NodeNames": ["n1"]})
        assert response.status_code == 400
        assert (
            "Pod.spec.containers[0].resources.requests.nvidia.com/gpu: invalid quantity "
            "'1e1000000': too large" in response.json()["Error"]
        )


def test_a_poisoned_object_in_a_page_is_counted_and_the_rest_applied() -> None:
    core = make_core()
    metrics = Metrics()
    state = ClusterState(core, flush_effects=lambda: None, metrics=metrics)
    poisoned = make_node("bad").obj()
    poisoned["metadata"] = "bad"
    state.on_page("nodes", [_good_node(0), poisoned, _good_node(1)], True, True)
    assert {"good-n0", "good-n1"} <= set(core.snapshot.nodes)
    rejected = metrics.registry.get_sample_value(
        "gang_extender_cache_rejected_objects_total", {"kind": "nodes"}
    )
    assert rejected == 1


def test_mutate_denies_a_pod_it_cannot_read_instead_of_failing() -> None:
    # Found by the fuzz above: labels of the wrong JSON type raised inside admission.
    pod = make_pod("w0").group("job").obj()
    pod["metadata"]["labels"] = True
    response = WEBHOOK.post("/mutate", json=_review(pod, {}))
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["uid"] == "u1" and answer["allowed"] is False
    assert "could not read this pod" in answer["status"]["message"]
