"""Gang scheduling on the real kube-scheduler, API server and KWOK GPU nodes (issue: extender).

Every test makes its own pool of fake GPU nodes and pins its pods to it with a
nodeSelector, so tests sharing the session cluster cannot take each other's GPUs.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    BindRecorder,
    bound,
    condition_message,
    create,
    delete_pods,
    gang_pod,
    get_podgroup,
    list_pods,
    no_partial_gangs,
    placed_as_gang,
    planned,
    podgroup,
    ungate,
    wait_until,
)

HOLD_OBSERVATION_SECONDS = 6  # long enough for several scheduler retries of a held gang

# Every gang here ends whole or empty: the service's partial-gang counter stays 0.
pytestmark = pytest.mark.usefixtures("no_partial_gangs")


def test_seed_horovod_job_waits_for_a_gpu_node_then_binds_all_four(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=2)
    recorder = BindRecorder(raw, namespace)
    create(raw, namespace, podgroup("hvd", 4, minTaskMember={"master": 1, "worker": 3}))
    create(
        raw,
        namespace,
        gang_pod(
            "hvd-master",
            "hvd",
            cpu="500m",
            memory="1Gi",
            task="master",
            node_selector=pool.node_selector,
        ),
    )
    for i in range(3):
        create(
            raw,
            namespace,
            gang_pod(
                f"hvd-worker-{i}",
                "hvd",
                gpus=1,
                cpu="1",
                memory="2Gi",
                task="worker",
                node_selector=pool.node_selector,
            ),
        )

    message = wait_until(
        lambda: (
            "placeable" in condition_message(get_podgroup(raw, namespace, "hvd"))
            and condition_message(get_podgroup(raw, namespace, "hvd"))
        ),
        what="the PodGroup condition to say what is missing",
    )
    assert "needs 3 nvidia.com/gpu" in message
    assert "largest free node has 2" in message
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == [], (
        "no member may be bound while the gang does not fit"
    )
    assert get_podgroup(raw, namespace, "hvd")["status"]["phase"] == "Pending"

    added_at = time.time()
    gpu_nodes(1, gpus=4, labels=pool.node_selector)
    wait_until(lambda: len(bound(list_pods(raw, namespace))) == 4, what="all 4 members bound")
    recorder.stop()
    # The recorder's watch may deliver the last bindings after the list shows them.
    wait_until(lambda: len(recorder.first_bound) == 4, what="the recorder to see all 4 bindings")
    assert min(recorder.first_bound.values()) >= added_at, "a member was bound before the gang fit"
    binds = sorted(recorder.first_bound.values())
    print(
        f"\nseed gang: GPU node added -> all 4 bound in {binds[-1] - added_at:.2f}s "
        f"(first to last bind {binds[-1] - binds[0]:.3f}s)"
    )
    wait_until(
        lambda: (
            get_podgroup(raw, namespace, "hvd")["status"].get("phase") in ("Scheduled", "Running")
        ),
        what="PodGroup phase Scheduled/Running",
    )
    events = wait_until(
        lambda: [
            e
            for e in raw.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
            if e.get("reason") == "GangScheduled"
        ],
        what="the GangScheduled Event",
    )
    # One Event for the gang, on its PodGroup, naming every member and its node.
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [
        ("PodGroup", "hvd")
    ]
    assert placed_as_gang(raw, namespace, "hvd") == recorder.node_of


def test_gang_with_only_three_of_four_members_created_binds_none(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(2, gpus=8)
    create(raw, namespace, podgroup("partial", 4))
    for i in range(3):
        create(
            raw,
            namespace,
            gang_pod(f"partial-{i}", "partial", gpus=1, node_selector=pool.node_selector),
        )
    wait_until(
        lambda: "3/4 members exist" in condition_message(get_podgroup(raw, namespace, "partial")),
        what="the condition to say 3/4 members exist",
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == []
    assert condition_message(get_podgroup(raw, namespace, "partial")) == (
        f"gang {namespace}/partial: 3/4 members exist; waiting for the rest to be created "
        "(if the job creates fewer than 4 pods, set spec.minMember of PodGroup partial to the "
        "number it creates)"
    )


def test_eight_four_gpu_members_are_binpacked_onto_four_of_six_nodes(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(6, gpus=8)
    created_at = time.time()
    create(raw, namespace, podgroup("pack", 8))
    for i in range(8):
        create(
            raw, namespace, gang_pod(f"pack-{i}", "pack", gpus=4, node_selector=pool.node_selector)
        )
    pods = wait_until(
        lambda: (lambda ps: ps if len(bound(ps)) == 8 else None)(list_pods(raw, namespace)),
        what="all 8 members bound",
    )
    print(f"\nbinpack gang: 8 members created -> all bound in {time.time() - created_at:.2f}s")
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 4, f"binpack should fill 4 nodes, used {sorted(nodes)}"


def test_two_gangs_that_cannot_both_fit_never_both_hold_capacity(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(2, gpus=8)  # 16 GPUs; each gang needs 12
    create(raw, namespace, podgroup("left", 3))
    create(raw, namespace, podgroup("right", 3))
    for i in range(3):  # interleaved, as two jobs submitted at the same moment
        create(
            raw, namespace, gang_pod(f"left-{i}", "left", gpus=4, node_selector=pool.node_selector)
        )
        create(
            raw,
            namespace,
            gang_pod(f"right-{i}", "right", gpus=4, node_selector=pool.node_selector),
        )

    def one_gang_bound():
        pods = list_pods(raw, namespace)
        groups = {
            g: [p for p in pods if p["metadata"]["labels"]["gang-extender.io/group"] == g]
            for g in ("left", "right")
        }
        done = [g for g, ps in groups.items() if len(bound(ps)) == 3]
        return (done, groups) if done else None

    done, groups = wait_until(one_gang_bound, what="one whole gang bound")
    assert len(done) == 1
    winner = done[0]
    loser = "right" if winner == "left" else "left"
    time.sleep(HOLD_OBSERVATION_SECONDS)
    loser_pods = [
        p
        for p in list_pods(raw, namespace)
        if p["metadata"]["labels"]["gang-extender.io/group"] == loser
    ]
    assert bound(loser_pods) == [], "the waiting gang holds nothing"
    # Nor does it hold a reservation: a plan would be written on its members.
    assert not any(planned(p) for p in loser_pods), "the waiting gang holds a reservation"

    delete_pods(raw, namespace, f"gang-extender.io/group={winner}")
    wait_until(
        lambda: (
            len(
                bound(
                    [
                        p
                        for p in list_pods(raw, namespace)
                        if p["metadata"]["labels"]["gang-extender.io/group"] == loser
                    ]
                )
            )
            == 3
        ),
        what=f"gang {loser} bound after {winner} was deleted",
    )


def test_plain_gpu_pods_never_take_gpus_reserved_for_a_planned_gang(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    # 2 nodes x 4 GPUs. The gang reserves 3 GPUs on each node; big-1 is gated, so big-0
    # waits in the bind barrier and the reservation stays while plain pods arrive.
    pool = gpu_nodes(2, gpus=4)
    recorder = BindRecorder(raw, namespace)
    create(raw, namespace, podgroup("big", 2, scheduleTimeoutSeconds=120))
    create(raw, namespace, gang_pod("big-0", "big", gpus=3, node_selector=pool.node_selector))
    create(
        raw,
        namespace,
        gang_pod("big-1", "big", gpus=3, node_selector=pool.node_selector, gated=True),
    )
    wait_until(
        lambda: all(planned(p) for p in list_pods(raw, namespace)), what="the gang to be planned"
    )
    for i in range(4):
        create(raw, namespace, gang_pod(f"plain-{i}", "", gpus=1, node_selector=pool.node_selector))

    def plain_bound() -> list[str]:
        pods = bound(list_pods(raw, namespace))
        return sorted(
            p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("plain-")
        )

    # 8 GPUs - 6 reserved = room for exactly 2 plain pods, one per node.
    wait_until(lambda: len(plain_bound()) == 2, what="2 plain pods bound beside the reservation")
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert len(plain_bound()) == 2, "plain pods took GPUs reserved for the gang"
    assert [p["metadata"]["name"] for p in bound(list_pods(raw, namespace))] == plain_bound()

    ungate(raw, namespace, "big-1")
    wait_until(
        lambda: (
            {"big-0", "big-1"} <= {p["metadata"]["name"] for p in bound(list_pods(raw, namespace))}
        ),
        what="the gang bound on the GPUs it reserved",
    )
    recorder.stop()
    assert len(plain_bound()) == 2
    assert all(gpus <= 4 for gpus in recorder.max_gpus_per_node.values()), (
        recorder.max_gpus_per_node
    )


def barrier_waiting(gang_stack) -> int:
    """Members the service holds at bind barriers right now (its own gauge)."""
    for line in gang_stack.metrics_text().splitlines():
        if line.startswith("gang_extender_bind_barrier_waiting "):
            return int(float(line.split()[1]))
    raise AssertionError("gang_extender_bind_barrier_waiting is not exported")


def test_gang_caught_in_the_bind_barrier_by_a_service_kill_ends_fully_bound(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    # crash-3 is gated, so crash-0..2 reach bind and wait in the barrier for it: the
    # kill lands while three binds are held, and no member may be bound alone by the
    # restarted service either.
    pool = gpu_nodes(2, gpus=8)
    create(raw, namespace, podgroup("crash", 4, scheduleTimeoutSeconds=120))
    for i in range(4):
        create(
            raw,
            namespace,
            gang_pod(
                f"crash-{i}", "crash", gpus=2, node_selector=pool.node_selector, gated=(i == 3)
            ),
        )
    wait_until(
        lambda: barrier_waiting(gang_stack) == 3,
        timeout=60,
        what="three members waiting in the bind barrier",
    )
    assert bound(list_pods(raw, namespace)) == []
    gang_stack.restart_service(kill=True)
    # The scheduler retries the three binds against the new process; they meet again in
    # the rebuilt barrier, and still nothing is bound while crash-3 cannot arrive.
    wait_until(
        lambda: barrier_waiting(gang_stack) == 3,
        timeout=60,
        what="the three members back in the barrier after the restart",
    )
    assert bound(list_pods(raw, namespace)) == []
    ungate(raw, namespace, "crash-3")
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 4,
        timeout=120,
        what="all 4 bound after the restart",
    )


def test_annotation_only_group_gets_a_podgroup_created_and_is_scheduled(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=8)
    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(
                f"anno-{i}",
                "anno",
                gpus=1,
                node_selector=pool.node_selector,
                annotations={"gang-extender.io/min-available": "2"},
            ),
        )
    wait_until(
        lambda: get_podgroup(raw, namespace, "anno"),
        what="the PodGroup created from the annotation",
    )
    assert get_podgroup(raw, namespace, "anno")["spec"]["minMember"] == 2
    wait_until(lambda: len(bound(list_pods(raw, namespace))) == 2, what="both members bound")


def test_members_that_disagree_on_size_are_held_with_an_event(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=8)
    create(
        raw,
        namespace,
        gang_pod(
            "odd-0",
            "odd",
            gpus=1,
            node_selector=pool.node_selector,
            annotations={"gang-extender.io/min-available": "2"},
        ),
    )
    create(
        raw,
        namespace,
        gang_pod(
            "odd-1",
            "odd",
            gpus=1,
            node_selector=pool.node_selector,
            annotations={"gang-extender.io/min-available": "3"},
        ),
    )

    def disagreement_event():
        events = raw.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        return [
            e
            for e in events
            if e.get("reason") == "GangWaiting" and "disagree" in e.get("message", "")
        ]

    wait_until(disagreement_event, what="a GangWaiting event naming the disagreement")
    assert bound(list_pods(raw, namespace)) == []


def test_member_that_never_reaches_bind_times_out_the_barrier_and_nothing_is_bound(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    # The planner does not model host ports: it plans both members onto the only node,
    # but kube-scheduler's own NodePorts filter keeps "late" off it (the port is taken),
    # so "early" waits in the bind barrier until the group's schedule timeout.
    pool = gpu_nodes(1, gpus=8)
    port_holder = gang_pod(
        "port-holder", "", node_selector=pool.node_selector, scheduler="default-scheduler"
    )
    port_holder["spec"]["containers"][0]["ports"] = [{"containerPort": 7000, "hostPort": 7000}]
    create(raw, namespace, port_holder)
    wait_until(lambda: bound(list_pods(raw, namespace)), what="the port holder bound")
    create(raw, namespace, podgroup("stuck", 2, scheduleTimeoutSeconds=8))
    create(raw, namespace, gang_pod("early", "stuck", gpus=1, node_selector=pool.node_selector))
    late = gang_pod("late", "stuck", gpus=1, node_selector=pool.node_selector)
    late["spec"]["containers"][0]["ports"] = [{"containerPort": 7000, "hostPort": 7000}]
    create(raw, namespace, late)

    def timeout_events():
        events = raw.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        return [e for e in events if e.get("reason") == "GangTimeout"]

    events = wait_until(timeout_events, what="a GangTimeout event")
    assert "late" in events[0]["message"]
    members = [p for p in list_pods(raw, namespace) if p["metadata"]["name"] in ("early", "late")]
    assert bound(members) == [], "a timed-out barrier must leave nothing bound"
    assert get_podgroup(raw, namespace, "stuck")["status"]["phase"] in ("Pending", "Scheduling")
