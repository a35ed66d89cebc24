"""Every accelerator resource (issue 29, "Every accelerator"): the setting's matcher,
and what the project does for nvidia.com/gpu done for each (planner invariants,
holds, starvation placeholders, gauges, hostfile slots, GPU routing), table-driven."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.cli import _settings_error
from extender.config import Settings
from extender.domain.objects.accelerators import (
    DEFAULT_ACCELERATORS,
    AcceleratorPatternError,
    Accelerators,
)
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.policy import GroupTopology, Policy, Strategy, default_topology
from extender.domain.objects.quantity import pod_gpus
from extender.domain.planning.planner import Placement, Shortfall, plan_gang
from extender.domain.state.decisions import PlaceholderCreate, Verdict
from extender.injection.gpu_routing import wants_routing
from extender.kube.reservation_writes import placeholder_pod
from extender.policy_file import load_policy
from tests.builders import make_node, make_pod, make_podgroup, placeholder_pod_info
from tests.core_builder import make_core
from tests.unit.test_reservations import BIG, CREATED_AT_T0, T0, core_with

RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "habana.ai/gaudi",
    "google.com/tpu",
    "aws.amazon.com/neuroncore",
    "deviceclass.resource.kubernetes.io/gpu.example.com",
]
POLICIES = [Policy(), Policy(name="spread", strategy=Strategy.SPREAD)]


def nodes_of(resource: str, gpus: list[int]) -> dict[str, NodeInfo]:
    return {
        f"n{i}": NodeInfo.from_api(
            make_node(f"n{i}").gpus(g, resource).label("clique", f"c{i % 2}").obj()
        )
        for i, g in enumerate(gpus)
    }


def members_of(resource: str, gpus: list[int], group: str = "g") -> list[PodInfo]:
    return [
        PodInfo.from_api(make_pod(f"{group}-{i}").group(group).gpus(g, resource).obj())
        for i, g in enumerate(gpus)
    ]


# ------------------------------------------------------------------- the matcher
def test_the_default_matches_each_vendor_and_dra_class_resources() -> None:
    for resource in RESOURCES:
        assert DEFAULT_ACCELERATORS.matches(resource), resource
    for plain in ("cpu", "memory", "pods", "ephemeral-storage", "example.com/foo", "nvidia.com/x"):
        assert not DEFAULT_ACCELERATORS.matches(plain), plain


def test_a_trailing_star_is_a_prefix_and_only_there() -> None:
    accelerators = Accelerators.from_setting("vendor.example/acc-*, other.example/gpu")
    assert accelerators.matches("vendor.example/acc-big")
    assert not accelerators.matches("vendor.example/ac")
    assert accelerators.matches("other.example/gpu") and not accelerators.matches("amd.com/gpu")
    assert accelerators.default == "other.example/gpu"


@pytest.mark.parametrize(
    "setting", ["", " , ", "gpu", "nvidia.com/*gpu", "nvidia.com/g*u", "NVIDIA.com/gpu", "a/b c"]
)
def test_a_bad_setting_is_refused(setting: str) -> None:
    with pytest.raises(AcceleratorPatternError):
        Accelerators.from_setting(setting)


def test_a_bad_setting_stops_start_up_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANG_ACCELERATOR_RESOURCES", "nvidia.com/gpu,gpu")
    with pytest.raises(Exception) as caught:
        Settings()
    message = _settings_error(caught.value, {})
    assert message.startswith("invalid setting: GANG_ACCELERATOR_RESOURCES=")
    assert "'gpu' is not an extended resource name" in message


def test_the_setting_reaches_the_matcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANG_ACCELERATOR_RESOURCES", "example.com/npu*")
    matcher = Settings().accelerators
    assert matcher.matches("example.com/npu-4") and not matcher.matches("nvidia.com/gpu")


def test_a_gang_is_keyed_on_the_accelerator_it_asks_most_of() -> None:
    requests = [{"amd.com/gpu": 2, "nvidia.com/gpu": 1}, {"amd.com/gpu": 1, "cpu": 4000}]
    assert DEFAULT_ACCELERATORS.main(requests) == "amd.com/gpu"
    assert DEFAULT_ACCELERATORS.main([{"cpu": 1}]) == "nvidia.com/gpu"
    assert DEFAULT_ACCELERATORS.amount(requests[0]) == 3  # each counted


def test_a_bad_entry_is_refused_in_the_documented_words() -> None:
    with pytest.raises(AcceleratorPatternError) as caught:
        Accelerators.from_setting("nvidia.com/gpu,gpu")
    assert str(caught.value) == (
        "'gpu' is not an extended resource name (vendor.example/name) "
        "nor such a name ending in '*' (a prefix pattern)"
    )


def test_an_empty_entry_is_skipped_and_the_entries_after_it_still_count() -> None:
    accelerators = Accelerators.from_setting("example.com/npu, ,example.com/tpu,")
    assert accelerators.matches("example.com/npu") and accelerators.matches("example.com/tpu")


def test_a_prefix_is_the_entry_without_its_star() -> None:
    accelerators = Accelerators.from_setting("example.com/npu*")
    assert accelerators.matches("example.com/npu") and accelerators.matches("example.com/npu-4")
    assert not accelerators.matches("example.com/np-4")
    # Prefixes only: a gang asking none of them is keyed on nvidia.com/gpu.
    assert accelerators.default == "nvidia.com/gpu"


def test_a_setting_naming_nothing_says_what_to_write() -> None:
    with pytest.raises(
        AcceleratorPatternError, match="^names no resource; e.g. nvidia.com/gpu,amd"
    ):
        Accelerators.from_setting(" , ")


@pytest.mark.parametrize(
    ("requests", "main"),
    [
        pytest.param(
            [{"nvidia.com/gpu": 2}, {"amd.com/gpu": 2}], "amd.com/gpu", id="a tie: by name"
        ),
        pytest.param(
            [{"amd.com/gpu": 1}, {"amd.com/gpu": 1}, {"amd.com/gpu": 1}, {"nvidia.com/gpu": 2}],
            "amd.com/gpu",
            id="summed over the members",
        ),
        pytest.param([{"amd.com/gpu": 0, "cpu": 2}], "nvidia.com/gpu", id="zero is not asked"),
        pytest.param([{"amd.com/gpu": 1}], "amd.com/gpu", id="one is asked"),
        pytest.param(
            [{"nvidia.com/gpu": 2}, {"amd.com/gpu": 1}],
            "nvidia.com/gpu",
            id="the most asked, though last by name (amd.com/gpu first, asked less)",
        ),
        pytest.param(
            [{"amd.com/gpu": 1, "google.com/tpu": 3}, {"nvidia.com/gpu": 2}],
            "google.com/tpu",
            id="the most asked, neither first nor last by name",
        ),
        pytest.param([], "nvidia.com/gpu", id="no member: the default"),
    ],
)
def test_the_main_accelerator_is_the_one_asked_most(
    requests: list[dict[str, int]], main: str
) -> None:
    assert DEFAULT_ACCELERATORS.main(requests) == main


def test_what_a_pod_asks_and_a_node_offers_is_the_positive_accelerator_amounts() -> None:
    requests = {"amd.com/gpu": 0, "nvidia.com/gpu": 1, "google.com/tpu": 2, "cpu": 4}
    assert DEFAULT_ACCELERATORS.asked(requests) == {"nvidia.com/gpu": 1, "google.com/tpu": 2}
    assert DEFAULT_ACCELERATORS.amount(requests) == 3
    assert DEFAULT_ACCELERATORS.offered(requests) == ["google.com/tpu", "nvidia.com/gpu"]


# ----------------------------------------------------- planner invariants per resource
@pytest.mark.parametrize("resource", RESOURCES)
@given(
    nodes_gpu=st.lists(st.integers(0, 8), min_size=1, max_size=8),
    members_gpu=st.lists(st.integers(0, 8), min_size=1, max_size=10),
    policy=st.sampled_from(POLICIES),
)
@settings(max_examples=60, deadline=None)
def test_no_overcommit_and_all_or_nothing_for_each_resource(
    resource: str, nodes_gpu: list[int], members_gpu: list[int], policy: Policy
) -> None:
    nodes = nodes_of(resource, nodes_gpu)
    members = members_of(resource, members_gpu)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    outcome = plan_gang(members, free, nodes, policy)
    if isinstance(outcome, Placement):
        assert set(outcome.nodes) == {m.uid for m in members}
        used: dict[str, int] = defaultdict(int)
        for m in members:
            used[outcome.nodes[m.uid]] += m.requests.get(resource, 0)
        for name, gpus in used.items():
            assert gpus <= free[name].get(resource, 0)
    else:
        assert isinstance(outcome, Shortfall) and outcome.placeable < outcome.total
        # A total that does not fit is told in the resource's own name.
        if sum(members_gpu) > sum(nodes_gpu) and not resource.startswith("deviceclass."):
            assert f"needs {sum(members_gpu)} {resource} in all" in outcome.message


@pytest.mark.parametrize("resource", RESOURCES)
@given(
    nodes_gpu=st.lists(st.integers(0, 8), min_size=1, max_size=10),
    size=st.integers(1, 4),
    count=st.integers(1, 10),
)
@settings(max_examples=60, deadline=None)
def test_equal_members_use_the_fewest_nodes_for_each_resource(
    resource: str, nodes_gpu: list[int], size: int, count: int
) -> None:
    nodes = nodes_of(resource, nodes_gpu)
    members = [
        PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(size, resource).obj())
        for i in range(count)
    ]
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    slots = sorted((g // size for g in nodes_gpu), reverse=True)
    outcome = plan_gang(members, free, nodes, Policy())
    if sum(slots) < count:
        assert isinstance(outcome, Shortfall)
        return
    fewest, held = 0, 0
    for s in slots:
        if held >= count:
            break
        held += s
        fewest += 1
    assert isinstance(outcome, Placement)
    assert len(set(outcome.nodes.values())) == fewest


@pytest.mark.parametrize("resource", RESOURCES)
def test_a_gang_prefers_one_clique_for_each_resource(resource: str) -> None:
    # n0, n2 in clique c0 (4 + 4), n1, n3 in c1 (8 + 0): 2 x 4 fits one node of c1 or
    # both of c0; the fewest nodes is n1 alone, in one clique either way. With n1
    # full, the gang stays in c0 rather than take n3 (empty) plus a node of c0.
    nodes = nodes_of(resource, [4, 8, 4, 0])
    members = members_of(resource, [4, 4])
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    outcome = plan_gang(
        members, free, nodes, Policy(), topology=GroupTopology(preferred=("clique",))
    )
    assert isinstance(outcome, Placement) and set(outcome.nodes.values()) == {"n1"}
    free["n1"][resource] = 2
    outcome = plan_gang(
        members, free, nodes, Policy(), topology=GroupTopology(preferred=("clique",))
    )
    assert isinstance(outcome, Placement) and set(outcome.nodes.values()) == {"n0", "n2"}


def test_a_pod_asking_two_accelerators_has_each_counted_on_its_own() -> None:
    both = {
        "a": NodeInfo.from_api(make_node("a").gpus(4).obj()),
        "b": NodeInfo.from_api(make_node("b").gpus(4, "amd.com/gpu").obj()),
    }
    pod = PodInfo.from_api(make_pod("m").group("g").gpus(2).gpus(2, "amd.com/gpu").obj())
    free = {name: dict(n.allocatable) for name, n in both.items()}
    outcome = plan_gang([pod], free, both, Policy())
    assert isinstance(outcome, Shortfall)  # no node offers both
    assert "amd.com/gpu" in outcome.message or "nvidia.com/gpu" in outcome.message
    free["a"]["amd.com/gpu"] = 2
    assert isinstance(plan_gang([pod], free, both, Policy()), Placement)


# ------------------------------------------------------------------- through the core
def test_an_amd_gang_is_held_naming_the_resource_then_planned_whole() -> None:
    core = make_core([make_node("n1").gpus(4, "amd.com/gpu").obj()])
    members = members_of("amd.com/gpu", [2, 2, 2], group="amd")
    for m in members:
        core.observe_pod(
            PodInfo.from_api(
                make_pod(m.name).group("amd").gpus(2, "amd.com/gpu").min_available(3).obj()
            ),
            0.0,
        )
    pods = core.snapshot.members(next(iter(core.snapshot.group_keys())))
    held = core.filter(pods[0], ["n1"], 1.0)
    assert held.verdict is Verdict.WAIT
    reason = held.message or " ".join([*held.failed.values(), *held.unresolvable.values()])
    assert "needs 6 amd.com/gpu in all" in reason, held
    core.apply_node(NodeInfo.from_api(make_node("n2").gpus(8, "amd.com/gpu").obj()))
    planned = core.filter(pods[0], ["n1", "n2"], 2.0)
    assert planned.verdict is Verdict.PLANNED
    plan = next(iter(core.ledger.plans.values()))
    assert set(plan.placements.values()) == {"n2"}  # fewest nodes: the one that holds 6


def test_a_placeholder_holds_the_reservations_own_resource() -> None:
    create = PlaceholderCreate(
        GroupKey("t", "g"),
        "g-hold-n1-1",
        "n1",
        3,
        "amd.com/gpu",
    )
    pod = placeholder_pod_info(create)
    assert pod.requests.get("amd.com/gpu") == 3 and "nvidia.com/gpu" not in pod.requests
    body = placeholder_pod(
        namespace="t",
        name="x",
        group="g",
        node="n1",
        gpus=2,
        owner=None,
        seal="s",
        resource="nvidia.com/mig-1g.10gb",
    )
    limits = body["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "2"}


# -------------------------------------------------------- hostfile slots, GPU routing
@pytest.mark.parametrize("resource", RESOURCES)
def test_slots_and_routing_count_each_accelerator(resource: str) -> None:
    pod = make_pod("p").gpus(3, resource).scheduler("default-scheduler").obj()
    assert pod_gpus(pod["spec"]) == 3
    assert wants_routing(pod)
    assert not wants_routing(make_pod("q").cpu("1").scheduler("default-scheduler").obj())
    narrow = Accelerators.from_setting("nvidia.com/gpu")
    if resource != "nvidia.com/gpu" and not resource.startswith("deviceclass."):
        assert not wants_routing(pod, narrow) and pod_gpus(pod["spec"], narrow) == 0


# ------------------------------------------------------------------- NVLink domains
def test_the_nvlink_policy_prefers_one_gpu_clique() -> None:
    policy = load_policy(Path(__file__).resolve().parents[2] / "policies" / "binpack-nvlink.yaml")
    assert policy.strategy is Strategy.BINPACK
    assert default_topology(policy) == GroupTopology(preferred=("nvidia.com/gpu.clique",))
    # ...and a gang planned under it stays in one clique when one holds it.
    nodes = {
        name: NodeInfo.from_api(
            make_node(name).gpus(gpus).label("nvidia.com/gpu.clique", clique).obj()
        )
        for name, gpus, clique in (
            ("a", 4, "u.1"),
            ("b", 4, "u.1"),
            ("c", 6, "u.2"),
            ("d", 2, "u.2"),
        )
    }
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    outcome = plan_gang(members_of("nvidia.com/gpu", [4, 4]), free, nodes, policy)
    assert isinstance(outcome, Placement) and set(outcome.nodes.values()) == {"a", "b"}
    # Without the clique, binpack takes the 6-GPU node and one 4-GPU node (tightest first).
    plain = plan_gang(members_of("nvidia.com/gpu", [4, 4]), free, nodes, Policy())
    assert isinstance(plain, Placement) and "c" in set(plain.nodes.values())


# ------------------------------------------------------ starvation, for each resource
@pytest.mark.parametrize("resource", ["amd.com/gpu", "nvidia.com/mig-1g.10gb"])
def test_a_starving_gang_reserves_and_holds_its_own_resource(resource: str) -> None:
    """A 4-accelerator node full of 1-accelerator pods, a 4 x 1 gang starving for it:
    the freed accelerator is held for the gang (a plain pod asking it is refused, one
    asking another resource is not), its placeholder requests the gang's resource."""
    t0 = T0
    core = core_with([make_node("n1").gpus(4, resource).gpus(2).obj()], starvation=5)
    smalls = []
    for i in range(4):
        small = PodInfo.from_api(make_pod(f"s{i}").gpus(1, resource).node("n1").obj())
        core.observe_pod(small, t0)
        smalls.append(small)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("big", 4), source="PodGroup"))
    big = [
        PodInfo.from_api(
            make_pod(f"big-{i}").group("big").gpus(1, resource).created(CREATED_AT_T0).obj()
        )
        for i in range(4)
    ]
    for pod in big:
        core.observe_pod(pod, t0)
    held = core.filter(big[0], ["n1"], t0)
    assert held.verdict is Verdict.WAIT
    core.expire(t0 + 6)
    reservation = core.starvation.reservations[BIG]
    assert reservation.resource == resource and reservation.need == 4
    core.forget_pod(smalls[0].uid, t0 + 7)
    core.expire(t0 + 7)
    (made,) = [e for e in core.drain_effects() if isinstance(e, PlaceholderCreate)]
    assert (made.resource, made.gpus, made.node) == (resource, 1, "n1")
    assert core.starving_holds()["n1"] == (BIG, 1, resource)
    refused = core.filter(PodInfo.from_api(make_pod("p").gpus(1, resource).obj()), ["n1"], t0 + 7)
    assert refused.nodes == [] and f"1 free {resource} on n1 are reserved" in refused.failed["n1"]
    other = core.filter(PodInfo.from_api(make_pod("q").gpus(1).obj()), ["n1"], t0 + 7)
    assert other.nodes == ["n1"]  # nvidia.com/gpu is not what the gang holds
    status = core.starvation.reserving_message(BIG)
    assert f"1/4 {resource} free" in status
