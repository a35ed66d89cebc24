"""Policy files: the shipped ones load; a bad one stops start-up with the field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.cli import main
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import (
    Policy,
    PolicyError,
    Strategy,
    Topology,
    TopologyMode,
    policy_from_mapping,
)
from extender.domain.planning.planner import Placement, Shortfall, plan_gang
from extender.policy_file import load_policy
from tests.builders import make_node, make_pod

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.mark.parametrize("path", sorted(POLICIES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_policies_load(path: Path) -> None:
    assert load_policy(path).name == path.stem


def test_no_policy_file_means_binpack() -> None:
    assert load_policy(None) == Policy(name="binpack", strategy=Strategy.BINPACK, topology=None)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("strategy: pack\n", "field 'strategy'", id="unknown strategy"),
        pytest.param("name: x\nstrategyy: binpack\n", "field 'strategyy'", id="misspelt field"),
        pytest.param(
            "topology: {mode: required}\n", "field 'topology.key'", id="topology without key"
        ),
        pytest.param("- binpack\n", "expected a mapping", id="a list instead of a mapping"),
        pytest.param("name: [unclosed\n", "not valid YAML", id="broken YAML"),
    ],
)
def test_bad_policy_file_is_refused_with_the_field_named(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert needle in str(err.value)
    assert str(path) in str(err.value)


def test_serve_with_a_bad_policy_exits_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("strategy: pack\n")
    assert main(["serve", "--policy", str(path)]) == 2
    assert "field 'strategy'" in capsys.readouterr().err


def test_every_problem_in_a_policy_is_named_in_one_message() -> None:
    """Two mistakes: both named, so one round trip fixes the file."""
    with pytest.raises(PolicyError) as err:
        policy_from_mapping({"strategy": "pack", "colour": "blue"}, source="policy file p.yaml")
    message = str(err.value)
    assert message.startswith("policy file p.yaml: field 'strategy': ")
    assert "; field 'colour': " in message


def test_missing_policy_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")


def _nodes(*specs: tuple[str, int, str]) -> dict[str, NodeInfo]:
    return {n: NodeInfo.from_api(make_node(n).gpus(g).label("zone", z).obj()) for n, g, z in specs}


def _members(count: int, gpus: int) -> list[PodInfo]:
    return [PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(gpus).obj()) for i in range(count)]


def test_spread_puts_members_on_different_nodes() -> None:
    nodes = _nodes(("a", 8, "z1"), ("b", 8, "z1"), ("c", 8, "z1"))
    free = {n: dict(i.allocatable) for n, i in nodes.items()}
    outcome = plan_gang(
        _members(3, 2), free, nodes, Policy(name="spread", strategy=Strategy.SPREAD)
    )
    assert isinstance(outcome, Placement)
    assert len(set(outcome.nodes.values())) == 3


def test_binpack_puts_members_together() -> None:
    nodes = _nodes(("a", 8, "z1"), ("b", 8, "z1"), ("c", 8, "z1"))
    free = {n: dict(i.allocatable) for n, i in nodes.items()}
    outcome = plan_gang(_members(3, 2), free, nodes, Policy())
    assert isinstance(outcome, Placement)
    assert len(set(outcome.nodes.values())) == 1


def test_topology_keeps_a_gang_in_one_zone_when_it_fits() -> None:
    nodes = _nodes(("a1", 4, "z1"), ("a2", 4, "z1"), ("b1", 4, "z2"), ("b2", 2, "z2"))
    free = {n: dict(i.allocatable) for n, i in nodes.items()}
    policy = Policy(name="zone", topology=Topology(key="zone"))
    outcome = plan_gang(_members(2, 3), free, nodes, policy)
    assert isinstance(outcome, Placement)
    zones = {nodes[n].labels["zone"] for n in outcome.nodes.values()}
    assert len(zones) == 1


def test_required_topology_waits_rather_than_splitting() -> None:
    nodes = _nodes(("a1", 4, "z1"), ("b1", 4, "z2"))
    free = {n: dict(i.allocatable) for n, i in nodes.items()}
    policy = Policy(name="zone", topology=Topology(key="zone", mode=TopologyMode.REQUIRED))
    outcome = plan_gang(_members(2, 3), free, nodes, policy)
    assert isinstance(outcome, Shortfall)
    assert "no single zone domain fits" in outcome.message
    preferred = plan_gang(
        _members(2, 3), free, nodes, Policy(name="zone", topology=Topology(key="zone"))
    )
    assert isinstance(preferred, Placement)
