"""The webhook picks task indexes from its pod watch, on the real control plane.

A user scales a group up in a busy labelled namespace: every member gets its own
index, and the service answered from the pod watch it already keeps (no list of
the namespace per create), falling back to a list only while that watch was
being re-established (gang_extender_index_reads_total, docs/webhook.md).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import MIN_AVAILABLE_ANNOTATION, TASK_INDEX_ANNOTATION
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import gang_pod

BUSY = 60  # pods of other groups and none already in the namespace
BURST = 20
NOBODY = "no-such-scheduler"  # the pods stay Pending: no scheduling traffic mixes in


def counters(stack: GangStack) -> dict[tuple[str, str], float]:
    """The index-read and pod-watch-restart counters, by (metric, label value)."""
    wanted: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(stack.metrics_text()):
        for sample in family.samples:
            if sample.name == "gang_extender_index_reads_total":
                wanted[("reads", sample.labels["source"])] = sample.value
            elif (
                sample.name == "gang_extender_watch_restarts_total"
                and sample.labels.get("resource") == "pods"
            ):
                key = ("pod watch restarts", "all")
                wanted[key] = wanted.get(key, 0.0) + sample.value
    return wanted


def create_pod(raw: RawApi, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    return raw.call("POST", path_of("api", "v1", "namespaces", namespace, "pods"), body=pod)


def test_scaling_a_group_up_in_a_busy_namespace_gives_distinct_indexes_from_the_pod_watch(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    # The namespace already holds other pods: members of other groups and plain pods.
    for i in range(BUSY):
        group = f"other-{i % 6}" if i % 2 else ""  # "": a plain pod, kept off the webhook
        pod = gang_pod(
            f"other-{i}", group, annotations={MIN_AVAILABLE_ANNOTATION: "2"}, scheduler=NOBODY
        )
        try:
            create_pod(raw, injected_namespace, pod)
        except KubeError as err:
            raise AssertionError(f"creating the namespace's other pods failed: {err}") from err
    before = counters(gang_stack)

    def create(position: int) -> dict[str, Any]:
        pod = gang_pod(
            f"burst-{position}",
            "scaled",
            annotations={MIN_AVAILABLE_ANNOTATION: str(BURST)},
            scheduler=NOBODY,
        )
        return create_pod(raw, injected_namespace, pod)

    with ThreadPoolExecutor(max_workers=BURST) as pool:
        created = list(pool.map(create, range(BURST)))
    after = counters(gang_stack)

    indexes = sorted(int(p["metadata"]["annotations"][TASK_INDEX_ANNOTATION]) for p in created)
    assert indexes == list(range(BURST))
    assert len({p["spec"]["hostname"] for p in created}) == BURST

    def delta(key: tuple[str, str]) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    from_watch, from_list = delta(("reads", "watch")), delta(("reads", "list"))
    assert from_watch + from_list == BURST, (before, after)
    assert from_watch > 0, f"no create was answered from the pod watch: {before} -> {after}"
    if from_list:  # only while the pod watch was being re-established
        assert delta(("pod watch restarts", "all")) > 0, (
            f"{from_list:.0f} creates listed the namespace while the pod watch was up"
        )
