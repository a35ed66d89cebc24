"""Resource bounds (issue 30): one tenant's sizes cannot sink the others' answers.

For each size a user controls, the size is grown (x10, x100, to the limit, past the
limit) and the test counts what the service builds or answers: bytes of the /filter
answer, members a layout names, planner steps. Never time: what is counted is
what a hostile tenant would make the service spend. Each limit is in
extender/domain/objects/limits.py and docs/podgroup.md#limits.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.api.extender import filter_result
from extender.api.wire import ExtenderArgs
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.lifecycle.lifecycle_policy import (
    PODS_READY_TIMEOUT_ANNOTATION,
    POLICIES_ANNOTATION,
    policy_from_annotations,
    policy_from_spec,
)
from extender.domain.objects.limits import (
    MAX_GROUP_SIZE,
    MAX_REASON_CHARS,
    MAX_TASKS,
    MAX_TOPOLOGY_LABELS,
    PLANNER_STEP_BUDGET,
)
from extender.domain.objects.membership import (
    JOB_COMPLETION_INDEX_ANNOTATION,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
    MembershipError,
)
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.policy import GroupTopology, Policy
from extender.domain.planning import planner
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.state.decisions import Verdict
from extender.injection.admission import AdmissionDenied, read_membership
from extender.injection.layout import resolve_layout
from tests.builders import cluster, gang, gpu_node, make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_800_000_000.0
GPU = "nvidia.com/gpu"


def core_with_nodes(count: int) -> GangCore:
    return make_core(make_node(f"node-{i:04d}").gpus(8).obj() for i in range(count))


def answer_bytes(core: GangCore, pod: dict[str, Any], nodes: list[str]) -> tuple[int, Any]:
    """The /filter answer for `pod` over `nodes`, as the bytes kube-scheduler receives."""
    info = PodInfo.from_api(pod)
    core.observe_pod(info, T0)
    decision = core.filter(info, nodes, T0)
    args = ExtenderArgs.model_validate({"Pod": pod, "NodeNames": nodes})
    return len(orjson.dumps(filter_result(args, decision))), decision


def tasks_text(count: int) -> str:
    return ",".join(f"t{i}=1" for i in range(count))


# ------------------------------------------------- finding 2: the /filter answer size
@pytest.mark.parametrize("tasks", [20, 200, MAX_TASKS, 2_000, 20_000])
def test_the_filter_answer_stays_bounded_however_many_tasks_a_pod_names(tasks: int) -> None:
    """The issue's case at 1,000 candidate nodes: min-available 20000 and tasks
    t0..t19999 answered 600 MiB. Every reason is at most MAX_REASON_CHARS, so the
    answer is at most that per node, whatever the annotations hold."""
    core = core_with_nodes(1_000)
    nodes = sorted(core.snapshot.nodes)
    pod = (
        make_pod("p0", "hostile")
        .group("big")
        .gpus(1)
        .min_available(max(tasks, 20))
        .annotation(TASKS_ANNOTATION, tasks_text(tasks))
        .obj()
    )
    size, decision = answer_bytes(core, pod, nodes)
    reasons = {**decision.failed, **decision.unresolvable}
    assert reasons, "the gang is held: every node says why"
    assert max(len(reason) for reason in reasons.values()) <= MAX_REASON_CHARS
    per_node = MAX_REASON_CHARS + len('"node-0000":"",') + 16
    assert size <= len(nodes) * per_node + 1_024


@pytest.mark.parametrize("members", [2, 20, 200, 2_000])
def test_a_reason_names_the_first_members_and_counts_the_rest(members: int) -> None:
    """Members that disagree on min-available: the message lists a few, then "and N more"."""
    core = core_with_nodes(2)
    pods = [
        make_pod(f"m{i}", "t").group("g").gpus(1).min_available(100 + i).obj()
        for i in range(members)
    ]
    for pod in pods[:-1]:
        core.observe_pod(PodInfo.from_api(pod), T0)
    size, decision = answer_bytes(core, pods[-1], sorted(core.snapshot.nodes))
    message = decision.message
    assert len(message) <= MAX_REASON_CHARS
    assert "m0=100" in message
    if members > 8:
        assert f"and {members - 5} more" in message


def test_an_annotation_is_quoted_short_in_a_reason() -> None:
    """A 200 KB Kueue topology annotation is not echoed whole (it was, per node)."""
    core = core_with_nodes(10)
    pod = (
        make_pod("p0", "t")
        .group("g")
        .gpus(1)
        .min_available(2)
        .annotation("kueue.x-k8s.io/podset-preferred-topology", "x/" + "y" * 200_000)
        .obj()
    )
    size, decision = answer_bytes(core, pod, sorted(core.snapshot.nodes))
    assert decision.verdict is Verdict.REJECT
    assert "kueue.x-k8s.io/podset-preferred-topology" in decision.message
    assert len(decision.message) <= MAX_REASON_CHARS
    assert size <= 10 * (MAX_REASON_CHARS + 64) + 1_024


def test_one_gangs_oversized_spec_leaves_another_tenants_answer_as_it_was() -> None:
    """Other tenants' answers do not depend on the hostile gang's sizes."""

    def other_answer(hostile_tasks: int) -> Any:
        core = core_with_nodes(4)
        hostile = (
            make_pod("p0", "hostile")
            .group("big")
            .gpus(1)
            .min_available(20_000)
            .annotation(TASKS_ANNOTATION, tasks_text(hostile_tasks))
            .obj()
        )
        answer_bytes(core, hostile, sorted(core.snapshot.nodes))
        mine = [make_pod(f"w{i}", "team").group("job").gpus(1).min_available(2).obj() for i in "01"]
        core.observe_pod(PodInfo.from_api(mine[0]), T0)
        return answer_bytes(core, mine[1], sorted(core.snapshot.nodes))[1]

    quiet = other_answer(1)
    for tasks in (10, 1_000, 20_000):
        loud = other_answer(tasks)
        assert loud.verdict is quiet.verdict is Verdict.PLANNED
        assert loud.nodes == quiet.nodes


# ----------------------------------- finding 1: topology labels and planner recursion
@pytest.mark.parametrize("labels", [MAX_TOPOLOGY_LABELS + 1, 100, 1_000])
def test_a_podgroup_with_too_many_topology_labels_is_invalid_naming_the_limit(
    labels: int,
) -> None:
    spec = GroupSpec.from_podgroup(
        make_podgroup("g", 2, topology={"preferred": [f"example.com/l{i}" for i in range(labels)]}),
        source="PodGroup",
    )
    assert spec.error is not None
    assert f"at most {MAX_TOPOLOGY_LABELS}" in spec.error
    assert len(spec.error) <= MAX_REASON_CHARS


def test_topology_labels_up_to_the_limit_are_accepted() -> None:
    preferred = [f"example.com/l{i}" for i in range(MAX_TOPOLOGY_LABELS)]
    spec = GroupSpec.from_podgroup(
        make_podgroup("g", 2, topology={"preferred": preferred}), source="PodGroup"
    )
    assert spec.error is None
    assert spec.topology == GroupTopology(preferred=tuple(preferred))


def counted_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the planner's placements (its unit of work) while a test runs."""
    steps = [0]
    original = planner._Planner.nodes_level

    def counting(self: Any, free: Any) -> Any:
        steps[0] += 1
        return original(self, free)

    monkeypatch.setattr(planner._Planner, "nodes_level", counting)
    return steps


@pytest.mark.parametrize("labels", [10, 100, 1_000, 5_000])
def test_the_planner_never_recurses_per_label_and_its_work_is_bounded(
    labels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a topology the readers would refuse (here given to plan_gang directly):
    no RecursionError, and at most PLANNER_STEP_BUDGET placements however many labels
    and domains there are. Each label splits the 16 nodes in two another way, the
    shape that made every level branch."""
    keys = [f"example.com/l{i}" for i in range(labels)]
    nodes = [
        gpu_node(f"n{n:02d}", 4, **{key: str((n >> (i % 4)) & 1) for i, key in enumerate(keys)})
        for n in range(16)
    ]
    by_name, free = cluster(*nodes)
    steps = counted_steps(monkeypatch)
    outcome = plan_gang(
        gang(6, 4), free, by_name, Policy(), topology=GroupTopology(preferred=tuple(keys))
    )
    assert isinstance(outcome, Placement)
    assert len(set(outcome.nodes.values())) == 6
    assert steps[0] <= PLANNER_STEP_BUDGET


# --------------------------------------------- finding 3: sizes, indexes and wiring
@pytest.mark.parametrize(
    "size", [MAX_GROUP_SIZE + 1, 10**8, pytest.param(10**5000, id="5001-digits")]
)
def test_a_min_member_past_the_limit_is_invalid_naming_it(size: int) -> None:
    spec = GroupSpec.from_podgroup(make_podgroup("g", size), source="PodGroup")
    assert spec.error is not None
    assert f"at most {MAX_GROUP_SIZE}" in spec.error
    assert len(spec.error) <= MAX_REASON_CHARS


def test_a_min_member_at_the_limit_is_accepted() -> None:
    spec = GroupSpec.from_podgroup(make_podgroup("g", MAX_GROUP_SIZE), source="PodGroup")
    assert spec.error is None
    assert spec.min_member == MAX_GROUP_SIZE


@pytest.mark.parametrize(
    "task_minimums",
    [
        {"worker": MAX_GROUP_SIZE + 1},
        {f"t{i}": 1 for i in range(MAX_TASKS + 1)},
        {"x" * 64: 1},
    ],
    ids=["count", "tasks", "name"],
)
def test_min_task_member_past_a_limit_is_invalid(task_minimums: dict[str, int]) -> None:
    spec = GroupSpec.from_podgroup(
        make_podgroup("g", MAX_GROUP_SIZE, minTaskMember=task_minimums), source="PodGroup"
    )
    assert spec.error is not None
    assert "at most" in spec.error
    assert len(spec.error) <= MAX_REASON_CHARS


@pytest.mark.parametrize(
    "value", [str(MAX_GROUP_SIZE + 1), "99999999", pytest.param("9" * 5_000, id="5000-digits")]
)
def test_min_available_past_the_limit_holds_the_pod_naming_the_limit(value: str) -> None:
    pod = PodInfo.from_api(
        make_pod("p", "t").group("g").annotation("gang-extender.io/min-available", value).obj()
    )
    assert pod.group_error is not None
    assert f"at most {MAX_GROUP_SIZE}" in pod.group_error
    assert len(pod.group_error) <= MAX_REASON_CHARS


@pytest.mark.parametrize("tasks", [MAX_TASKS + 1, 20_000])
def test_a_tasks_annotation_past_the_limit_is_refused_naming_it(tasks: int) -> None:
    from extender.domain.objects.membership import parse_task_layout

    with pytest.raises(MembershipError, match=f"at most {MAX_TASKS} tasks") as raised:
        parse_task_layout(tasks_text(tasks))
    assert len(str(raised.value)) <= MAX_REASON_CHARS


@pytest.mark.parametrize(
    "index_annotation", [TASK_INDEX_ANNOTATION, JOB_COMPLETION_INDEX_ANNOTATION]
)
@pytest.mark.parametrize("index", [10, 1_000, 99_999_999])
def test_wiring_never_names_members_up_to_an_index_far_past_the_group_size(
    index_annotation: str, index: int
) -> None:
    """min-available 1 and index 99999999 built 10^8 members (1.4 GiB). The layout
    refuses an index past the group's size limits before naming any member."""
    pods = [
        make_pod("p0", "t")
        .group("g")
        .min_available(1)
        .annotation(index_annotation, str(index))
        .obj()
    ]
    podgroup = make_podgroup("g", 1, "t")
    from extender.domain.objects.limits import max_task_index

    if index < max_task_index(1):
        layout = resolve_layout(group="g", podgroup=podgroup, pods=pods)
        assert len(layout.members()) == index + 1
        return
    with pytest.raises(MembershipError, match=f"indexes below {max_task_index(1)}") as raised:
        resolve_layout(group="g", podgroup=podgroup, pods=pods)
    assert len(str(raised.value)) <= MAX_REASON_CHARS
    # The webhook denies the same pod in an injected namespace, naming the limit.
    with pytest.raises(AdmissionDenied, match=r"index.* below (257|10000)"):
        read_membership(pod=pods[0], namespace="t", group="g", podgroup=podgroup)


def test_the_task_index_limit_grows_with_the_group_and_stops_at_the_size_limit() -> None:
    from extender.domain.objects.limits import max_task_index

    assert max_task_index(1) >= 256  # an elastic job of minimum 1 runs a few hundred
    assert max_task_index(100) >= 400
    assert max_task_index(MAX_GROUP_SIZE) == MAX_GROUP_SIZE
    assert all(max_task_index(n) <= MAX_GROUP_SIZE for n in (1, 10, 1_000, 5_000, 10**9))


# ------------------------------------------------- finding 5: overflow-safe numbers
@pytest.mark.parametrize(
    "value",
    [
        pytest.param("9" * 400, id="400-digits"),
        pytest.param("9" * 5_000, id="5000-digits"),
        "1e999",
        str(10**10),
        "-1",
        "3.5",
        "nan",
    ],
)
def test_a_long_number_in_pods_ready_timeout_is_an_invalid_policy(value: str) -> None:
    policy = policy_from_annotations(
        {POLICIES_ANNOTATION: "PodsNotReady=RestartJob", PODS_READY_TIMEOUT_ANNOTATION: value}
    )
    assert policy.error is not None
    assert PODS_READY_TIMEOUT_ANNOTATION in policy.error
    assert len(policy.error) <= MAX_REASON_CHARS


@pytest.mark.parametrize("value", [pytest.param(10**400, id="401-digits"), 10**10, float("inf")])
def test_a_huge_number_in_the_podgroup_policy_is_an_invalid_policy(value: Any) -> None:
    policy = policy_from_spec(
        {
            "policies": [{"event": "PodsNotReady", "action": "RestartJob"}],
            "podsReadyTimeoutSeconds": value,
        }
    )
    assert policy.error is not None
    assert "podsReadyTimeoutSeconds" in policy.error


@pytest.mark.parametrize("field", ["starvationSeconds", "scheduleTimeoutSeconds"])
@pytest.mark.parametrize("value", [pytest.param(10**400, id="401-digits"), 10**12])
def test_huge_seconds_in_a_podgroup_are_invalid_not_an_overflow(field: str, value: int) -> None:
    spec = GroupSpec.from_podgroup(make_podgroup("g", 2, **{field: value}), source="PodGroup")
    assert spec.error is not None
    assert field in spec.error


# ------------------------------------------------- failures contained per gang
def test_one_gangs_planning_error_holds_that_gang_and_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hostile gang is older, so the queue pass plans it first on the team's filter:
    its exception (a RecursionError, in the issue) answered the team's /filter too."""
    from extender.domain.gang import gang_planning as gang_planning_module
    from extender.domain.state.decisions import GangFaulted

    real_plan_gang = gang_planning_module.plan_gang

    def exploding(members: Any, *args: Any, **kwargs: Any) -> Any:
        if any(m.namespace == "hostile" for m in members):
            raise RecursionError("maximum recursion depth exceeded")
        return real_plan_gang(members, *args, **kwargs)

    monkeypatch.setattr(gang_planning_module, "plan_gang", exploding)
    core = core_with_nodes(4)
    nodes = sorted(core.snapshot.nodes)
    hostile = [
        make_pod(f"h{i}", "hostile").group("big").gpus(1).min_available(2).obj() for i in "01"
    ]
    core.observe_pod(PodInfo.from_api(hostile[0]), T0 - 10)
    _, held = answer_bytes(core, hostile[1], nodes)
    assert held.verdict is Verdict.WAIT
    assert "planning failed (RecursionError" in held.message
    faults = [e for e in core.drain_effects() if isinstance(e, GangFaulted)]
    assert [(f.group.namespace, f.where) for f in faults] == [("hostile", "plan")]
    assert "Traceback" in faults[0].details
    from extender.domain.status.status import group_status

    status = group_status(core, faults[0].group)
    assert status is not None
    assert (status.reason, status.message) == ("InvalidSpec", held.message)

    mine = [make_pod(f"w{i}", "team").group("job").gpus(1).min_available(2).obj() for i in "01"]
    core.observe_pod(PodInfo.from_api(mine[0]), T0)
    _, answer = answer_bytes(core, mine[1], nodes)
    assert answer.verdict is Verdict.PLANNED
    # The faulted gang is not planned again (nor logged again) until it changes.
    assert not [e for e in core.drain_effects() if isinstance(e, GangFaulted)]
    again = core.filter(PodInfo.from_api(hostile[1]), nodes, T0 + 5)
    assert again.message == held.message
    assert not [e for e in core.drain_effects() if isinstance(e, GangFaulted)]
    # A change to the gang (here its members) plans it afresh: the error is new news.
    monkeypatch.setattr(gang_planning_module, "plan_gang", real_plan_gang)
    core.observe_pod(
        PodInfo.from_api(make_pod("h2", "hostile").group("big").gpus(1).min_available(2).obj()),
        T0 + 6,
    )
    replanned = core.filter(PodInfo.from_api(hostile[1]), nodes, T0 + 7)
    assert "planning failed" not in replanned.message


@pytest.mark.parametrize(
    "annotations",
    [
        {"gang-extender.io/ssh-port": "9" * 5_000},
        {"gang-extender.io/depends-on": "master=" + "9" * 5_000},
        {
            "gang-extender.io/depends-on": "master",
            "gang-extender.io/depends-on-timeout": "9" * 5_000,
        },
        {"gang-extender.io/depends-on": ",".join(f"t{i}" for i in range(MAX_TASKS + 1))},
    ],
    ids=["ssh-port", "depends-on-count", "depends-on-timeout", "depends-on-tasks"],
)
def test_the_webhook_denies_long_numbers_in_its_annotations_naming_the_field(
    annotations: dict[str, str],
) -> None:
    """int() of 5,000 digits raised a ValueError the webhook did not expect (not a denial)."""
    builder = make_pod("p0", "t").group("g").min_available(2).task("worker")
    for key, value in annotations.items():
        builder = builder.annotation(key, value)
    with pytest.raises(AdmissionDenied) as denied:
        read_membership(pod=builder.obj(), namespace="t", group="g", podgroup=None)
    assert next(iter(annotations)) in str(denied.value) or "annotation" in str(denied.value)
    assert len(str(denied.value)) <= MAX_REASON_CHARS


# ------------------------------------------- wiring: one object per group, bounded
@pytest.mark.parametrize(
    ("group", "task", "writes"),
    [("job", "worker", True), ("a" * 40, "worker-with-a-long-name", False)],
    ids=["short-names-fit", "long-names-refused"],
)
def test_wiring_a_group_at_the_size_limit_fits_one_configmap_or_writes_nothing(
    group: str, task: str, writes: bool
) -> None:
    """10,000 members with long names render 4.5 MB: the API server would refuse the
    POST on every pass. It is refused before any write, naming the limit."""
    from extender.domain.objects.membership import TASK_LABEL
    from extender.injection.sizes import MAX_OBJECT_DATA_BYTES
    from extender.kube.wiring import WiringController
    from tests.unit.test_webhook_wiring import FakeApiServer

    server = FakeApiServer()
    podgroup = make_podgroup(group, MAX_GROUP_SIZE, "team", minTaskMember={task: MAX_GROUP_SIZE})
    podgroup["metadata"]["uid"] = "pg-uid"
    pods = [make_pod(f"{group}-0", "team").group(group).label(TASK_LABEL, task).obj()]
    controller = WiringController(server)
    if writes:
        controller.reconcile(namespace="team", group=group, podgroup=podgroup, pods=pods)
        configmap = server.get("configmaps", f"{group}-svc", "team")
        size = sum(len(k) + len(v) for k, v in configmap["data"].items())
        assert size <= MAX_OBJECT_DATA_BYTES
        return
    with pytest.raises(MembershipError, match=f"at most {MAX_OBJECT_DATA_BYTES:,}"):
        controller.reconcile(namespace="team", group=group, podgroup=podgroup, pods=pods)
    assert server.writes == []


def test_an_upstream_min_count_past_the_limit_is_refused_naming_it() -> None:
    from extender.domain.objects.model import upstream_podgroup_spec

    spec = upstream_podgroup_spec(
        {
            "metadata": {"name": "train", "namespace": "t"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": MAX_GROUP_SIZE + 1}}},
        }
    )
    assert spec.error is not None
    assert f"at most {MAX_GROUP_SIZE} members" in spec.error


@pytest.mark.parametrize("length", [100, 10_000, 200_000])
def test_a_long_quantity_is_quoted_short_in_the_pods_reason(length: int) -> None:
    pod = make_pod("p", "t").group("g").min_available(2).obj()
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1" + "x" * length
    info = PodInfo.from_api(pod)
    assert info.group_error is not None
    assert len(info.group_error) <= 300


def test_a_long_ssh_path_is_denied_before_it_is_copied_per_member() -> None:
    pod = (
        make_pod("p0", "t")
        .group("g")
        .min_available(2)
        .annotation("gang-extender.io/ssh-path", "/" + "a" * 5_000)
        .obj()
    )
    with pytest.raises(AdmissionDenied, match="at most 1024 characters") as denied:
        read_membership(pod=pod, namespace="t", group="g", podgroup=None)
    assert len(str(denied.value)) <= MAX_REASON_CHARS


def test_a_starving_gangs_error_holds_that_gang_not_every_filter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every filter first runs the starvation pass, which plans each starving gang's
    reservation: one gang's exception there answered every tenant's /filter."""
    from extender.domain.starvation.gang_starvation import StarvationReservations
    from extender.domain.state.decisions import GangFaulted

    real_start = StarvationReservations._start_reservation
    tried: list[str] = []

    def exploding(self: Any, key: Any, now: float) -> None:
        tried.append(key.namespace)
        if key.namespace == "hostile":
            raise OverflowError("int too large to convert to float")
        real_start(self, key, now)

    monkeypatch.setattr(StarvationReservations, "_start_reservation", exploding)
    core = make_core(timeouts=Timeouts(60, 30, 2, starvation_seconds=1.0))
    for name in ("node-0", "node-1"):
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(8).obj()))
    core.observe_pod(
        PodInfo.from_api(make_pod("hog", "other").gpus(8).node("node-0").phase("Running").obj()),
        T0,
    )
    hostile = [
        make_pod(f"h{i}", "hostile").group("big").gpus(8).min_available(2).obj() for i in "01"
    ]
    for pod in hostile:
        core.observe_pod(PodInfo.from_api(pod), T0)
    nodes = ["node-0", "node-1"]
    assert core.filter(PodInfo.from_api(hostile[0]), nodes, T0).verdict is Verdict.WAIT
    # Past its starvation time: the next filter's starvation pass tries its reservation.
    mine = [make_pod(f"w{i}", "team").group("job").gpus(1).min_available(2).obj() for i in "01"]
    core.observe_pod(PodInfo.from_api(mine[0]), T0 + 5)
    core.observe_pod(PodInfo.from_api(mine[1]), T0 + 5)
    answer = core.filter(PodInfo.from_api(mine[1]), nodes, T0 + 5)
    assert "hostile" in tried
    assert answer.verdict is Verdict.PLANNED
    faults = [e for e in core.drain_effects() if isinstance(e, GangFaulted)]
    assert [f.group.namespace for f in faults] == ["hostile"]
    assert "planning failed (OverflowError" in core.groups[faults[0].group].message
    # Not tried again, nor reported again, while the gang is unchanged.
    tried.clear()
    core.filter(PodInfo.from_api(mine[0]), nodes, T0 + 10)
    assert "hostile" not in tried
    assert not [e for e in core.drain_effects() if isinstance(e, GangFaulted)]


# ------------------------------------------------ property: any annotation, any length
_PARSED_ANNOTATIONS = [
    "gang-extender.io/min-available",
    TASKS_ANNOTATION,
    "gang-extender.io/starvation-seconds",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-required-topology",
    POLICIES_ANNOTATION,
    PODS_READY_TIMEOUT_ANNOTATION,
    "gang-extender.io/max-retry",
]


def _grown(seed: str, factor: int) -> str:
    return seed * factor


@settings(max_examples=60, deadline=None)
@given(
    values=st.dictionaries(
        st.sampled_from(_PARSED_ANNOTATIONS),
        st.builds(
            _grown,
            st.sampled_from(["9", "x", "t1=1,", "a/", "-", "PodFailed=AbortJob,", " "]),
            st.sampled_from([1, 10, 100, 1_000, 10_000, 50_000]),
        ),
        min_size=1,
    )
)
def test_whatever_a_pod_annotates_every_reason_and_the_answer_stay_bounded(
    values: dict[str, str],
) -> None:
    """Every parsed annotation, each value grown x1 to x50,000: no exception escapes,
    every reason is at most MAX_REASON_CHARS, the answer at most that per node, and
    the lifecycle policy's error (InvalidPolicy) is bounded too."""
    core = core_with_nodes(50)
    builder = make_pod("p0", "t").group("g").gpus(1)
    for key, value in values.items():
        builder = builder.annotation(key, value)
    size, decision = answer_bytes(core, builder.obj(), sorted(core.snapshot.nodes))
    reasons = {**decision.failed, **decision.unresolvable}
    assert all(len(reason) <= MAX_REASON_CHARS for reason in reasons.values())
    assert size <= 50 * (MAX_REASON_CHARS + 32) + 1_024
    policy = policy_from_annotations(values)
    assert policy.error is None or len(policy.error) <= MAX_REASON_CHARS


# ------------------------------------------------ the helpers that keep messages short
def test_clip_keeps_a_message_up_to_the_limit_and_says_how_much_it_cut() -> None:
    from extender.domain.objects.limits import clip

    exact = "m" * MAX_REASON_CHARS
    assert clip(exact) is exact
    cut = clip(exact + "x")
    assert len(cut) <= MAX_REASON_CHARS
    assert cut == "m" * (MAX_REASON_CHARS - 48) + "... (49 more characters)"
    assert clip("abcdefghij" * 10, 60) == "abcdefghijab... (88 more characters)"


def test_quoted_keeps_a_short_value_and_cuts_a_long_one_with_its_length() -> None:
    from extender.domain.objects.limits import QUOTED_CHARS, quoted

    assert quoted("x" * (QUOTED_CHARS - 2)) == repr("x" * (QUOTED_CHARS - 2))
    long = quoted("y" * QUOTED_CHARS)
    assert long == repr("y" * QUOTED_CHARS)[:QUOTED_CHARS] + f"... ({QUOTED_CHARS + 2} characters)"
    assert quoted(10**5000) == "(a number too long to show)"
    assert quoted(42) == "42"


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, ""),
        (1, "i0"),
        (5, "i0, i1, i2, i3, i4"),
        (6, "i0, i1, i2, i3, i4, and 1 more"),
        (20_000, "i0, i1, i2, i3, i4, and 19995 more"),
    ],
)
def test_listing_names_five_then_counts_the_rest(count: int, expected: str) -> None:
    from extender.domain.objects.limits import listing

    assert listing(f"i{n}" for n in range(count)) == expected
    assert listing(["a", "b", "c"], limit=2, sep="; ") == "a; b; and 1 more"


def test_too_big_names_the_limit_only_past_it() -> None:
    from extender.domain.objects.limits import too_big

    assert too_big(10, 10, "x") is None
    assert too_big(11, 10, "spec.x") == "spec.x=11 is more than this service accepts: at most 10"


@pytest.mark.parametrize(
    ("size", "limit"),
    [(1, 257), (64, 320), (85, 341), (86, 344), (2_500, 10_000), (2_499, 9_996), (10**9, 10_000)],
)
def test_max_task_index_is_four_times_the_size_or_size_plus_256_capped(
    size: int, limit: int
) -> None:
    from extender.domain.objects.limits import max_task_index

    assert max_task_index(size) == limit


def test_min_available_with_leading_zeros_is_its_number() -> None:
    pod = PodInfo.from_api(
        make_pod("p", "t")
        .group("g")
        .annotation("gang-extender.io/min-available", "0" * 12 + "2")
        .obj()
    )
    assert (pod.group_error, pod.min_available) == (None, 2)


# ------------------------------------------ each limit: at it accepted, past it refused
@pytest.mark.parametrize("field", ["scheduleTimeoutSeconds", "starvationSeconds"])
def test_seconds_at_the_limit_are_accepted_and_past_it_name_the_limit(field: str) -> None:
    from extender.domain.objects.limits import MAX_SECONDS

    at = GroupSpec.from_podgroup(make_podgroup("g", 2, **{field: MAX_SECONDS}), source="PodGroup")
    assert at.error is None
    past = GroupSpec.from_podgroup(
        make_podgroup("g", 2, **{field: MAX_SECONDS + 1}), source="PodGroup"
    )
    assert past.error == (
        f"PodGroup spec.{field}={MAX_SECONDS + 1} must be at most {MAX_SECONDS} seconds (a year)"
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1000", None),
        ("01000", None),
        (1000, None),
        ("1001", "annotation gang-extender.io/max-retry=1001 must be at most 1000"),
        (1001, "annotation gang-extender.io/max-retry=1001 must be at most 1000"),
        ("-1000", "annotation gang-extender.io/max-retry=-1000 must be >= 0"),
        (
            "9" * 100,
            f"annotation gang-extender.io/max-retry={repr('9' * 100)[:80]}... (102 characters) "
            "must be at most 1000",
        ),
    ],
)
def test_max_retry_at_the_limit_is_accepted_and_past_it_names_the_limit(
    value: Any, error: str | None
) -> None:
    policy = policy_from_annotations(
        {POLICIES_ANNOTATION: "PodFailed=RestartJob", "gang-extender.io/max-retry": value}
    )
    assert policy.error == error
    if error is None:
        assert policy.max_retry == 1000


def test_a_tasks_annotation_at_the_limits_is_read() -> None:
    from extender.domain.objects.membership import parse_task_layout

    assert len(parse_task_layout(tasks_text(MAX_TASKS))) == MAX_TASKS
    assert parse_task_layout(f"a={MAX_GROUP_SIZE - 1},b=1") == {"a": MAX_GROUP_SIZE - 1, "b": 1}
    with pytest.raises(MembershipError) as raised:
        parse_task_layout(f"a={MAX_GROUP_SIZE},b=1")
    assert str(raised.value) == (
        f"annotation {TASKS_ANNOTATION}='a={MAX_GROUP_SIZE},b=1' asks for "
        f"{MAX_GROUP_SIZE + 1} members; at most {MAX_GROUP_SIZE} members in a group"
    )
    with pytest.raises(MembershipError, match="expected a string 'task=count,...'"):
        parse_task_layout(5)  # type: ignore[arg-type]


def test_min_task_member_at_the_limits_is_read_and_a_bad_name_is_quoted() -> None:
    at = GroupSpec.from_podgroup(
        make_podgroup("g", MAX_GROUP_SIZE, minTaskMember={f"t{i}": 1 for i in range(MAX_TASKS)}),
        source="PodGroup",
    )
    assert at.error is None
    assert at.min_task_member is not None and len(at.min_task_member) == MAX_TASKS
    full = GroupSpec.from_podgroup(
        make_podgroup("g", MAX_GROUP_SIZE, minTaskMember={"worker": MAX_GROUP_SIZE}),
        source="PodGroup",
    )
    assert (full.error, full.min_task_member) == (None, {"worker": MAX_GROUP_SIZE})
    bad = GroupSpec.from_podgroup(
        make_podgroup("g", 2, minTaskMember={"Bad_Name": 1}), source="PodGroup"
    )
    assert bad.error == (
        "PodGroup spec.minTaskMember: task 'Bad_Name' must be a lower-case DNS label of "
        "at most 63 characters"
    )


@pytest.mark.parametrize(
    ("index", "refused"), [(MAX_GROUP_SIZE - 1, False), (MAX_GROUP_SIZE, True)]
)
def test_a_task_index_at_the_group_size_limit_is_refused_naming_it(
    index: int, refused: bool
) -> None:
    from extender.domain.objects.membership import explicit_task_index

    meta = {"annotations": {TASK_INDEX_ANNOTATION: str(index)}}
    if not refused:
        assert explicit_task_index(meta) == index
        return
    with pytest.raises(MembershipError) as raised:
        explicit_task_index(meta)
    assert str(raised.value) == (
        f"annotation {TASK_INDEX_ANNOTATION}='{index}' is past the largest index this service "
        f"accepts: indexes must be below {MAX_GROUP_SIZE}, the most members a group may have"
    )


def test_the_planner_counts_every_pass_over_a_room_against_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each grouping by a label and each placement is one step: the budget counts the
    work done, so a topology that keeps every level branching stops at the budget."""
    keys = [f"example.com/l{i}" for i in range(MAX_TOPOLOGY_LABELS)]
    # 64 nodes, each label a 4-way split (three crossing splits, repeated): every level
    # branches, far past the budget without it.
    nodes = [
        gpu_node(
            f"n{n:02d}", 4, **{key: str((n >> (2 * (i % 3))) & 3) for i, key in enumerate(keys)}
        )
        for n in range(64)
    ]
    by_name, free = cluster(*nodes)
    passes = [0]
    real_group_by, real_level = planner._group_by, planner._Planner.nodes_level

    def counting_group_by(*args: Any) -> Any:
        passes[0] += 1
        return real_group_by(*args)

    def counting_level(self: Any, room: Any) -> Any:
        passes[0] += 1
        return real_level(self, room)

    monkeypatch.setattr(planner, "_group_by", counting_group_by)
    monkeypatch.setattr(planner._Planner, "nodes_level", counting_level)
    plan = planner._Planner(gang(10, 4), by_name, Policy(), {}, frozenset(), tuple(keys))
    placed, misfit = plan.within(free)
    assert misfit is None and len(placed) == 10
    assert plan.steps == passes[0]
    assert PLANNER_STEP_BUDGET <= plan.steps <= PLANNER_STEP_BUDGET + 2 * MAX_TOPOLOGY_LABELS


_ZONE, _RACK, _ROW = "topology.kubernetes.io/zone", "example.com/rack", "example.com/row"


@pytest.mark.parametrize(
    ("nodes", "members", "keys", "steps", "used"),
    [
        pytest.param(
            [("n0", "a", "r0"), ("n1", "a", "r0"), ("n2", "a", "r1"), ("n3", "a", "r1")],
            (2, 8),
            [_ZONE, _RACK],
            3,  # zone: one domain (passed over); rack: two; then one placement in r0
            ["n0", "n1"],
            id="one-zone-passed-over",
        ),
        pytest.param(
            [(f"n{i}", f"z{i // 4}", f"r{i // 2}") for i in range(8)],
            (5, 4),
            [_ZONE, _RACK],
            4,
            ["n0", "n4", "n5", "n6", "n7"],
            id="spans-two-zones",
        ),
        pytest.param(
            [(f"n{i}", f"z{i // 2}", f"r{i}") for i in range(6)],
            (3, 4),
            [_ZONE, _RACK],
            7,  # no zone holds it: anywhere, and the two zones that cover it
            ["n0", "n4", "n5"],
            id="covered-by-two-of-three-zones",
        ),
        pytest.param(
            [(f"n{i}", "a", "b") for i in range(3)],
            (2, 4),
            [_ZONE, _RACK, _ROW],
            4,  # three labels of one value each: three groupings, one placement
            ["n0", "n2"],
            id="every-level-one-domain",
        ),
    ],
)
def test_the_planners_work_for_small_topologies_is_exactly_its_passes(
    nodes: list[tuple[str, str, str]],
    members: tuple[int, int],
    keys: list[str],
    steps: int,
    used: list[str],
) -> None:
    """Pinned: how many passes over a room each shape costs (a pass more or less per
    level is the planner doing other work than it says), and where the gang goes."""
    built = [
        gpu_node(name, 8 if members[1] == 8 else 4, zone=zone, rack=rack, **{_ROW: "c"})
        for name, zone, rack in nodes
    ]
    by_name, free = cluster(*built)
    plan = planner._Planner(gang(*members), by_name, Policy(), {}, frozenset(), tuple(keys))
    placed, misfit = plan.within(free)
    assert misfit is None
    assert (plan.steps, sorted(set(placed.values()))) == (steps, used)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("31536000", None),
        (
            "31536001",
            "annotation gang-extender.io/starvation-seconds='31536001' must be a number of "
            "seconds <= 31536000 (a year)",
        ),
        ("0", "annotation gang-extender.io/starvation-seconds='0' must be a number of seconds > 0"),
    ],
)
def test_the_starvation_annotation_at_a_year_is_read_and_past_it_names_the_limit(
    value: str, error: str | None
) -> None:
    pod = PodInfo.from_api(
        make_pod("p", "t").group("g").annotation("gang-extender.io/starvation-seconds", value).obj()
    )
    assert pod.group_error == error
    if error is None:
        assert pod.starvation_seconds == 31_536_000.0


def test_min_available_at_the_limit_is_read_and_past_it_is_quoted_in_the_error() -> None:
    at = PodInfo.from_api(make_pod("p", "t").group("g").min_available(MAX_GROUP_SIZE).obj())
    assert (at.group_error, at.min_available) == (None, MAX_GROUP_SIZE)
    past = PodInfo.from_api(make_pod("p", "t").group("g").min_available(MAX_GROUP_SIZE + 1).obj())
    assert past.group_error == (
        f"annotation gang-extender.io/min-available='{MAX_GROUP_SIZE + 1}' is more than this "
        f"service accepts: at most {MAX_GROUP_SIZE} members in a group"
    )
