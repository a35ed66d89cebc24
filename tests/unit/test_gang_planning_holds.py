"""What the core does and says when it tries to plan a held gang (filter steps 5-7).

A gang whose "does not fit" is memoised answers from the memo before the queue is
tried, so no gang ahead is planned on its account; a gang that does not fit is told
whom it waits behind: the gang ahead whose plan holds the room it lacks, not merely a
higher one, and never a gang on nodes kube-scheduler did not offer it; a member is
planned within what kube-scheduler offered even when the offer names a node the watch
has not delivered yet; a starving gang asked about while it reserves is told so; and
the pass that plans a starving gang ends its reservation at once.
"""

from __future__ import annotations

from typing import Any

from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.state.decisions import Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.unit.test_gang_queue import T0, core_with, gang, key, member, planned_groups
from tests.unit.test_reservations import BIG, churned_core, finish


def busy(core: GangCore, node: str, gpus: int) -> None:
    """A plain pod (priority 0) bound on `node`, using `gpus` GPUs."""
    pod = make_pod(f"busy-{node}").gpus(gpus).node(node).obj()
    core.observe_pod(PodInfo.from_api(pod), T0)


def add_gang(core: GangCore, name: str, pods: list[dict[str, Any]], now: float) -> None:
    """Gang `name` (minMember: all of `pods`) created now; kube-scheduler has not asked."""
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup(name, len(pods)), source="PodGroup")
    )
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), now)


# ------------------------------------------------------------ the memo comes first
def test_a_gang_still_short_answers_from_its_memo_and_plans_no_gang_ahead() -> None:
    # "low" does not fit (2 GPUs wanted, 1 free) and nothing since could change that:
    # its next filter is answered from the memo (step 5), so "high", created since and
    # never asked about, is not planned on its account (step 6 is not reached).
    core = core_with([make_node("n1").gpus(4).obj()], {"low": gang("low", 1, 2)})
    busy(core, "n1", 3)
    first = core.filter(member(core, "low-0"), ["n1"], T0)
    assert first.verdict is Verdict.WAIT
    add_gang(core, "high", gang("high", 1, 1, priority=9), T0 + 1)
    core.drain_effects()

    again = core.filter(member(core, "low-0"), ["n1"], T0 + 2)

    assert again == first
    assert core.drain_effects() == []
    assert key("high") not in core.ledger.plans


def test_a_gang_that_could_preempt_but_did_not_fit_answers_from_its_memo_alone() -> None:
    # With preemption on and a lower-priority pod bound, "low" keeps only the global
    # memo. "high" backs off after its plan was dropped (kube-scheduler stopped offering
    # its node); the back-off ends, nothing else changes: "low" is answered from that
    # memo and "high" is not planned on its account.
    core = core_with(
        [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()],
        {"high": gang("high", 1, 1, priority=9), "low": gang("low", 1, 5, priority=5)},
    )
    core.preemption_enabled = True
    busy(core, "n1", 1)
    assert core.filter(member(core, "high-0"), ["n1", "n2"], T0).nodes == ["n1"]
    assert core.filter(member(core, "high-0"), ["n2"], T0 + 1).verdict is Verdict.WAIT
    first = core.filter(member(core, "low-0"), ["n1", "n2"], T0 + 2)  # high backs off
    assert first.verdict is Verdict.WAIT
    assert key("high") not in core.ledger.plans
    core.drain_effects()

    again = core.filter(member(core, "low-0"), ["n1", "n2"], T0 + 4)

    assert again == first
    assert core.drain_effects() == []
    assert key("high") not in core.ledger.plans


# ------------------------------------------------------------- whom it waits behind
def test_a_gang_short_of_room_waits_behind_the_gang_whose_plan_holds_it_not_a_higher_one() -> None:
    # 7 GPUs free: "first" (8) does not fit, "second" (2) is planned (backfill), "last"
    # (6) would fit in the room second's plan holds: it waits behind second, though
    # first is ahead of both.
    core = core_with(
        [make_node("n1").gpus(8).obj()],
        {
            "first": gang("first", 1, 8, priority=9),
            "second": gang("second", 1, 2, priority=5),
            "last": gang("last", 1, 6, priority=1),
        },
    )
    busy(core, "n1", 1)
    assert core.filter(member(core, "first-0"), ["n1"], T0).verdict is Verdict.WAIT
    assert core.filter(member(core, "second-0"), ["n1"], T0).nodes == ["n1"]

    decision = core.filter(member(core, "last-0"), ["n1"], T0)

    message = (
        "gang default/last: 0/1 members placeable: needs 6 nvidia.com/gpu in all "
        "(6 for last-0), 5 free, largest free node has 5; "
        "waiting behind default/second (priority 5)"
    )
    assert (decision.verdict, decision.message) == (Verdict.WAIT, message)
    assert core.groups[key("last")].message == message


def test_a_gang_offered_other_nodes_than_a_planned_gang_holds_does_not_wait_behind_it() -> None:
    # "ahead" is planned on n1, the only node kube-scheduler offered it; "behind" would
    # fit in that room, but kube-scheduler offers it n2 only (1 GPU free there).
    core = core_with(
        [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()],
        {"ahead": gang("ahead", 1, 4, priority=9), "behind": gang("behind", 1, 2, priority=1)},
    )
    busy(core, "n2", 3)
    assert core.filter(member(core, "ahead-0"), ["n1"], T0).nodes == ["n1"]

    decision = core.filter(member(core, "behind-0"), ["n2"], T0)

    assert (decision.verdict, decision.message) == (
        Verdict.WAIT,
        "gang default/behind: 0/1 members placeable: needs 2 nvidia.com/gpu in all "
        "(2 for behind-0), 1 free, largest free node has 1",
    )


def test_an_offer_naming_an_undelivered_node_still_bounds_whom_a_gang_waits_behind() -> None:
    # kube-scheduler offers "behind" n2 and n3 (n3 not delivered yet): as many names as
    # the core knows nodes, yet not n1, which the held "ahead" wants. So "behind" does
    # not wait behind it, and is not planned on n1 either.
    core = core_with(
        [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()],
        {"ahead": gang("ahead", 1, 4, priority=9), "behind": gang("behind", 1, 3, priority=1)},
    )
    busy(core, "n1", 1)
    busy(core, "n2", 2)
    assert core.filter(member(core, "ahead-0"), ["n1"], T0).verdict is Verdict.WAIT

    decision = core.filter(member(core, "behind-0"), ["n2", "n3"], T0)

    # The hold counts only the room behind-0 may use: n2 (offered), not n1 (not offered).
    message = (
        "gang default/behind: 0/1 members placeable: needs 3 nvidia.com/gpu in all "
        "(3 for behind-0), 2 free, largest free node has 2"
    )
    assert (decision.verdict, decision.message) == (Verdict.WAIT, message)
    assert decision.unresolvable == {"n2": message, "n3": message}
    assert key("behind") not in core.ledger.plans


# ------------------------------------------------------------------ a starving gang
def test_a_starving_gang_asked_about_while_it_reserves_is_told_what_it_holds() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    finish(core, smalls[0], T0 + 7)
    asking = next(p for p in core.snapshot.pods.values() if p.name == "big-0")

    decision = core.filter(asking, ["n1"], T0 + 7)

    assert decision.verdict is Verdict.WAIT
    assert decision.message == (
        "gang default/big: reserving n1: 1/4 GPUs free; it has waited longer than its "
        "starvationSeconds (5 s), so nothing else of this scheduler takes a GPU that frees "
        "there until it fits; the nodes are not fenced: a pending member lacks the "
        "gang-extender.io/reserved toleration (the webhook adds it in labelled namespaces)"
    )
    assert core.groups[BIG].message == decision.message


def test_a_starving_gang_planned_from_its_reservation_ends_it_at_once() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    for pod in smalls:
        finish(core, pod, T0 + 7)

    assert BIG in core.ledger.plans
    assert core.starvation.reservations == {}
    assert core.starving_holds() == {}
    assert planned_groups(core) == [BIG.name]
