"""Reservations a plan holds, member by member (pure: the ledger alone).

The contract: a plan reserves each unbound member's requests on its planned node
(never one already bound, never twice for one gang); a member's reservation ends
exactly once, when it is bound, lost, or its plan dropped; a node with nothing
left reserved is no longer listed; and a node's owners are the gangs still
holding something there.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.cluster.ledger import Ledger, Plan
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.quantity import CPU, GPU

A = GroupKey("team-a", "big")
B = GroupKey("team-b", "small")
C = GroupKey("team-a", "mid")


def plan_for(
    group: GroupKey, placements: dict[str, str], *, gpus: int = 2, bound: set[str] | None = None
) -> Plan:
    return Plan(
        group=group,
        plan_id=1,
        placements=placements,
        requests={uid: {GPU: gpus, CPU: 1000} for uid in placements},
        names={uid: f"{group.namespace}/{uid}" for uid in placements},
        created_at=0.0,
        deadline=60.0,
        bound=set(bound or ()),
    )


def test_a_plan_reserves_every_members_requests_on_its_planned_node() -> None:
    ledger = Ledger()
    ledger.reserve(plan_for(A, {"a0": "n0", "a1": "n0", "a2": "n1"}))
    assert ledger.reserved("n0") == {GPU: 4, CPU: 2000}
    assert ledger.reserved("n1") == {GPU: 2, CPU: 1000}
    assert sorted(ledger.reserved_nodes()) == ["n0", "n1"]
    assert ledger.capacity_changed == {"n0", "n1"}
    assert ledger.reserved("n9") == {}


def test_a_member_already_bound_reserves_nothing_more() -> None:
    ledger = Ledger()
    ledger.reserve(plan_for(A, {"a0": "n0", "a1": "n1", "a2": "n1"}, bound={"a0"}))
    assert ledger.reserved("n0") == {}
    assert ledger.reserved("n1") == {GPU: 4, CPU: 2000}  # the members after it still count
    assert ledger.reserved_nodes() == ["n1"]
    assert ledger.plan_of("a0") is None
    assert ledger.capacity_changed == {"n1"}


def test_a_second_plan_for_the_same_gang_is_refused_and_the_first_kept() -> None:
    ledger = Ledger()
    first = plan_for(A, {"a0": "n0"})
    ledger.reserve(first)
    with pytest.raises(ValueError, match="gang team-a/big already has a plan"):
        ledger.reserve(plan_for(A, {"a0": "n1"}))
    assert ledger.plans[A] is first
    assert ledger.reserved("n1") == {}


def test_plan_ids_are_never_reused() -> None:
    ledger = Ledger()
    ids = [ledger.new_plan_id() for _ in range(3)]
    assert len(set(ids)) == 3 and ids == sorted(ids)


def test_each_change_is_a_new_generation() -> None:
    ledger = Ledger()
    seen = [ledger.generation]
    ledger.reserve(plan_for(A, {"a0": "n0", "a1": "n0"}))
    seen.append(ledger.generation)
    ledger.reserve(plan_for(B, {"b0": "n1"}))
    seen.append(ledger.generation)
    ledger.mark_bound("a0")
    seen.append(ledger.generation)
    ledger.forget_member("a1")
    seen.append(ledger.generation)
    ledger.drop(A)
    seen.append(ledger.generation)
    assert seen == sorted(set(seen)), seen


def test_a_bound_member_gives_its_reservation_back_once() -> None:
    ledger = Ledger()
    plan = plan_for(A, {"a0": "n0", "a1": "n0"})
    ledger.reserve(plan)
    ledger.capacity_changed.clear()
    assert ledger.plan_of("a0") is plan
    assert ledger.mark_bound("a0") is plan
    assert plan.bound == {"a0"}
    assert ledger.reserved("n0") == {GPU: 2, CPU: 1000}
    assert ledger.capacity_changed == {"n0"}
    assert ledger.plan_of("a0") is None
    assert ledger.mark_bound("a0") is None  # a second watch event releases nothing more
    assert ledger.reserved("n0") == {GPU: 2, CPU: 1000}


def test_the_last_reservation_on_a_node_takes_it_off_the_list() -> None:
    ledger = Ledger()
    ledger.reserve(plan_for(A, {"a0": "n0", "a1": "n1"}))
    ledger.mark_bound("a0")
    assert ledger.reserved_nodes() == ["n1"]
    assert ledger.reserved("n0") == {}


def test_a_lost_member_gives_its_reservation_back_without_counting_as_bound() -> None:
    ledger = Ledger()
    plan = plan_for(A, {"a0": "n0", "a1": "n1"})
    ledger.reserve(plan)
    ledger.capacity_changed.clear()
    assert ledger.forget_member("a1") is plan
    assert plan.bound == set()
    assert ledger.reserved_nodes() == ["n0"]
    assert ledger.capacity_changed == {"n1"}
    assert ledger.forget_member("a1") is None
    assert ledger.forget_member("nobody") is None
    assert ledger.mark_bound("nobody") is None


def test_dropping_a_plan_gives_back_only_what_its_members_still_hold() -> None:
    ledger = Ledger()
    plan = plan_for(A, {"a0": "n0", "a1": "n0", "a2": "n1"})
    ledger.reserve(plan)
    ledger.reserve(plan_for(B, {"b0": "n0"}, gpus=1))
    ledger.mark_bound("a0")
    ledger.capacity_changed.clear()
    assert ledger.drop(A) is plan
    assert A not in ledger.plans
    assert ledger.reserved("n0") == {GPU: 1, CPU: 1000}  # only B's member is left
    assert ledger.reserved_nodes() == ["n0"]
    assert ledger.capacity_changed == {"n0", "n1"}
    assert ledger.plan_of("a1") is None
    assert ledger.drop(A) is None


def test_a_nodes_owners_are_the_gangs_that_still_hold_something_there() -> None:
    ledger = Ledger()
    ledger.reserve(plan_for(B, {"b0": "n0", "b1": "n1"}, gpus=1))
    ledger.reserve(plan_for(A, {"a0": "n0", "a1": "n1"}))
    assert ledger.owners("n0") == [A, B]  # sorted, each once
    ledger.mark_bound("a0")
    assert ledger.owners("n0") == [B]
    ledger.plans[B].lost["b1"] = "deleted"  # as the barrier loses a member: marked, then
    ledger.forget_member("b1")  # its reservation given back
    assert ledger.owners("n1") == [A]
    assert ledger.owners("n9") == []
    ledger.drop(A)
    assert ledger.owners("n1") == [] and ledger.owners("n0") == [B]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reserve", "bind", "lose", "drop"]),
            st.sampled_from([A, B, C]),
            st.integers(min_value=0, max_value=3),
        ),
        max_size=30,
    )
)
@settings(max_examples=300, deadline=None)
def test_owners_from_the_index_are_the_gangs_scanned_from_every_plan(ops) -> None:
    """The kept per-node index answers what scanning every plan's unbound members did."""
    ledger = Ledger()
    for op, group, i in ops:
        plan = ledger.plans.get(group)
        uid = f"{group.name}-{i}"
        if op == "reserve" and plan is None:
            placements = {f"{group.name}-{k}": f"n{(k + len(group.name)) % 3}" for k in range(4)}
            ledger.reserve(plan_for(group, placements, bound={uid}))
        elif op == "bind":
            ledger.mark_bound(uid)
        elif op == "lose" and plan is not None and uid in plan.unbound:
            plan.lost[uid] = "deleted"
            ledger.forget_member(uid)
        elif op == "drop":
            ledger.drop(group)
        for node in ("n0", "n1", "n2", "n9"):
            scanned = {
                p.group
                for p in ledger.plans.values()
                for member, n in p.placements.items()
                if n == node and member in p.unbound
            }
            assert ledger.owners(node) == sorted(scanned), (ops, node)


def test_a_plans_barrier_waits_for_members_that_neither_arrived_bound_nor_were_lost() -> None:
    plan = plan_for(A, {"a0": "n0", "a1": "n0", "a2": "n1", "a3": "n1"})
    assert plan.waiting_for == {"a0", "a1", "a2", "a3"} and not plan.barrier_complete
    plan.bound.add("a0")
    plan.arrived.add("a1")
    plan.lost["a2"] = "deleted"
    assert plan.waiting_for == {"a3"}
    assert plan.unbound == {"a1", "a3"}
    assert not plan.barrier_complete and not plan.fully_bound
    plan.arrived.add("a3")
    assert plan.barrier_complete and not plan.fully_bound
    plan.bound |= {"a1", "a3"}
    assert plan.unbound == set() and plan.fully_bound
