"""/metrics after a gang run shows exactly what the run implies (docs/metrics.md).

The run gets its own control plane and service, so every value is known: one gang
of N one-GPU members, first held (N-1 members exist), then completed and bound
on a pool of GPU nodes labelled gang-extender.io/pool.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.nodes import GPU_RESOURCE, add_gpu_nodes, wait_for_nodes_ready
from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import INJECT_NAMESPACE_LABEL
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import (
    bound,
    condition_message,
    create,
    gang_pod,
    get_podgroup,
    list_pods,
    podgroup,
    ungate,
    wait_until,
)

MEMBERS = 4
NODES, GPUS_PER_NODE = 2, 4
POOL_LABEL = "gang-extender.io/pool"  # what gang_extender_gpus groups nodes by
PHASES = ("Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(stack: GangStack) -> Samples:
    """Every sample of /metrics by (sample name, sorted labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(stack.metrics_text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, *, default: float | None = None, **labels: str) -> float:
    """One sample's value. A sample that is not exported fails the test, unless the
    caller names a `default` (a labelled child nothing has touched yet is not exported)."""
    key = (name, tuple(sorted(labels.items())))
    if key not in samples:
        assert default is not None, f"{name}{labels} is not exported"
        return default
    return samples[key]


def groups_by_phase(samples: Samples) -> dict[str, float]:
    return {phase: value(samples, "gang_extender_groups", phase=phase) for phase in PHASES}


@pytest.fixture(scope="module")
def metrics_stack(bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GangStack]:
    cluster = LocalCluster(tmp_path_factory.mktemp("metrics-cluster"), bin_dir)
    cluster.start()
    stack = GangStack(cluster)
    try:
        stack.start()
        yield stack
    except BaseException:
        print(cluster.tail_logs(60))
        raise
    finally:
        stack.stop()
        cluster.stop()


def test_metrics_after_a_gang_run_show_what_the_run_implies(metrics_stack: GangStack) -> None:
    stack = metrics_stack
    api = stack.cluster.api_client()
    raw = RawApi(api)
    pool = f"pool-{uuid.uuid4().hex[:6]}"
    nodes = add_gpu_nodes(
        api, NODES, gpus=GPUS_PER_NODE, labels={POOL_LABEL: pool}, name_prefix=f"gpu-{pool}"
    )
    wait_for_nodes_ready(api, nodes)
    namespace = new_namespace(api, "metrics", labels={INJECT_NAMESPACE_LABEL: "enabled"})
    total_gpus = NODES * GPUS_PER_NODE

    wait_until(
        # The new pool is not exported until the service has seen its nodes.
        lambda: (
            value(
                scrape(stack),
                "gang_extender_gpus",
                default=0.0,
                pool=pool,
                resource=GPU_RESOURCE,
                state="free",
            )
            == total_gpus
        ),
        what="the pool's GPUs counted free",
    )
    before = scrape(stack)
    assert groups_by_phase(before) == dict.fromkeys(PHASES, 0.0), "a fresh cluster has no groups"

    # Held: N-1 of N members exist.
    create(raw, namespace, podgroup("train", MEMBERS))
    for i in range(MEMBERS - 1):
        create(
            raw,
            namespace,
            gang_pod(f"train-{i}", "train", gpus=1, node_selector={POOL_LABEL: pool}),
        )
    wait_until(
        lambda: "members exist" in condition_message(get_podgroup(raw, namespace, "train")),
        what="the gang to be held",
    )
    held = wait_until(
        lambda: (lambda s: s if groups_by_phase(s)["Pending"] == 1 else None)(scrape(stack)),
        what="gang_extender_groups{phase=Pending} 1",
    )
    assert groups_by_phase(held) == {**dict.fromkeys(PHASES, 0.0), "Pending": 1.0}
    assert (
        value(held, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="free")
        == total_gpus
    ), "a held gang holds no GPUs"
    assert (
        value(held, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="reserved") == 0
    )
    assert value(held, "gang_extender_reservations") == 0
    assert value(held, "gang_extender_gangs_bound_total") == value(
        before, "gang_extender_gangs_bound_total"
    )

    # Planned: the last member arrives gated, so the gang is planned and its other
    # members wait in the bind barrier while the reservation is held.
    create(
        raw,
        namespace,
        gang_pod(
            f"train-{MEMBERS - 1}",
            "train",
            gpus=1,
            node_selector={POOL_LABEL: pool},
            gated=True,
        ),
    )

    def planned() -> Samples | None:
        s = scrape(stack)
        return (
            s
            if value(s, "gang_extender_reservations") == MEMBERS
            and value(s, "gang_extender_bind_barrier_waiting") == MEMBERS - 1
            # Pool gauges are refreshed on the reconcile tick, a moment later.
            and value(s, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="reserved")
            == MEMBERS
            else None
        )

    reserved = wait_until(
        planned, what=f"{MEMBERS} members reserved, {MEMBERS - 1} waiting at the barrier"
    )
    assert (
        value(reserved, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="reserved")
        == MEMBERS
    )
    assert (
        value(reserved, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="bound") == 0
    )
    assert (
        value(reserved, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="free")
        == total_gpus - MEMBERS
    )
    assert bound(list_pods(raw, namespace)) == []

    # Completed: the last member may be scheduled; the gang is bound.
    ungate(raw, namespace, f"train-{MEMBERS - 1}")
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == MEMBERS,
        what=f"all {MEMBERS} members bound",
    )
    phase = wait_until(
        lambda: (
            (get_podgroup(raw, namespace, "train") or {}).get("status", {}).get("phase")
            == "Running"
            and "Running"
        ),
        what="PodGroup phase Running",
    )

    def settled() -> Samples | None:
        s = scrape(stack)
        return (
            s
            if groups_by_phase(s)[phase] == 1
            and value(s, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="bound")
            == MEMBERS
            else None
        )

    after = wait_until(settled, what="gauges to reflect the bound gang")
    print(
        "\n"
        + "\n".join(
            f"{name}{dict(labels)} {v}"
            for (name, labels), v in sorted(after.items())
            if name.startswith("gang_extender_") and not name.endswith(("_created", "_bucket"))
        )
    )

    # Counters and histograms: exactly one gang, N binds, at least N filters.
    assert (
        value(after, "gang_extender_gangs_bound_total")
        - value(before, "gang_extender_gangs_bound_total")
        == 1
    )
    assert (
        value(after, "gang_extender_gang_wait_seconds_count")
        - value(before, "gang_extender_gang_wait_seconds_count")
        == 1
    )
    assert value(after, "gang_extender_gang_wait_seconds_sum") > value(
        before, "gang_extender_gang_wait_seconds_sum"
    )
    assert value(after, "gang_extender_request_duration_seconds_count", verb="filter") >= MEMBERS
    assert value(after, "gang_extender_request_duration_seconds_count", verb="bind") >= MEMBERS
    assert value(after, "gang_extender_request_duration_seconds_count", verb="admit") >= MEMBERS, (
        "every member went through the webhook"
    )
    assert value(after, "gang_extender_request_errors_total", verb="bind", default=0.0) == 0
    assert value(after, "gang_extender_bind_barrier_timeouts_total") == 0
    # Gauges: one group, in the phase its PodGroup shows; the pool's GPUs add up.
    assert groups_by_phase(after) == {**dict.fromkeys(PHASES, 0.0), phase: 1.0}
    assert (
        value(after, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="bound")
        == MEMBERS
    )
    assert (
        value(after, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="reserved") == 0
    )
    assert (
        value(after, "gang_extender_gpus", pool=pool, resource=GPU_RESOURCE, state="free")
        == total_gpus - MEMBERS
    )
    assert value(after, "gang_extender_reservations") == 0
    assert value(after, "gang_extender_bind_barrier_waiting") == 0
    # Caches: listed and watching.
    for resource in ("pods", "nodes", "podgroups", "namespaces"):
        assert value(after, "gang_extender_cache_synced", resource=resource) == 1, resource
    # The standard collectors: the service process's own memory, CPU and fds.
    assert value(after, "process_resident_memory_bytes") > 0
    assert value(after, "process_cpu_seconds_total") > 0
    assert value(after, "process_open_fds") > 0
    assert any(name == "python_info" for name, _ in after), "python_info is exported"
