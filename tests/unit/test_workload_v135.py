"""Kubernetes 1.35's shape of the Workload API as a group source, and Volcano's second
group annotation (table tests).

The JSON shapes are those of k8s.io/api v0.35.4: core/v1 PodSpec.WorkloadRef
(`spec.workloadRef{name, podGroup, podGroupReplicaKey}`) and scheduling/v1alpha1
Workload (`spec.podGroups[]{name, policy{basic | gang{minCount}}}`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.controller.cluster_state import ClusterState
from extender.domain.cluster.foreign_podgroups import pick_podgroup
from extender.domain.objects import membership as m
from extender.domain.objects.model import (
    UPSTREAM_WORKLOAD_SOURCE,
    GroupSpec,
    PodInfo,
    upstream_workload_spec,
)
from extender.domain.status.status import _waiting_message
from extender.injection.admission import AdmissionDenied, pod_group
from extender.kube.cache import Watcher
from extender.kube.rawapi import KubeError
from extender.kube.resources import UPSTREAM_WORKLOADS
from extender.metrics import Metrics
from tests.builders import ImmediateLoop, PageNamesSink, make_cluster_state, spec_member
from tests.watch_fakes import PAGED

REPO = Path(__file__).resolve().parents[2]


def workload(name: str = "train", *pod_groups: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1"},
        "spec": {"podGroups": list(pod_groups)},
    }


def gang(name: str, min_count: object) -> dict[str, Any]:
    return {"name": name, "policy": {"gang": {"minCount": min_count}}}


def ref_pod(name: str, ref: object, **annotations: str) -> dict[str, Any]:
    return spec_member(name, annotations=annotations, workloadRef=ref)


# ---- the pod's spec.workloadRef ----


@pytest.mark.parametrize(
    ("ref", "group"),
    [
        pytest.param({"name": "train", "podGroup": "workers"}, "train-workers", id="no replica"),
        pytest.param(
            {"name": "train", "podGroup": "workers", "podGroupReplicaKey": "r1"},
            "train-workers-r1",
            id="a replica is a gang of its own",
        ),
        pytest.param(
            {"name": "train", "podGroup": "workers", "podGroupReplicaKey": ""},
            "train-workers",
            id="empty replica key",
        ),
        pytest.param(None, None, id="no workloadRef"),
    ],
)
def test_the_workload_ref_names_the_group(ref: object, group: str | None) -> None:
    spec = {"workloadRef": ref} if ref is not None else {}
    assert m.group_name({"name": "p"}, spec) == group


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        pytest.param(
            {"name": "train"},
            "field spec.workloadRef must set both name and podGroup, got {'name': 'train'}",
            id="no podGroup",
        ),
        pytest.param(
            {"podGroup": "workers", "name": ""},
            "field spec.workloadRef must set both name and podGroup, "
            "got {'podGroup': 'workers', 'name': ''}",
            id="empty name",
        ),
        pytest.param("train", "field spec.workloadRef='train' is not an object", id="a string"),
        pytest.param(
            {"name": "train", "podGroup": "w", "podGroupReplicaKey": 3},
            "field spec.workloadRef.podGroupReplicaKey=3 is not a string",
            id="replica key not a string",
        ),
        pytest.param(
            {"name": "a" * 45, "podGroup": "workers", "podGroupReplicaKey": "replica-0001"},
            f"field spec.workloadRef gives group name '{'a' * 45}-workers-replica-0001' "
            "(name-podGroup-podGroupReplicaKey), which is not a lower-case DNS label that "
            "starts with a letter and has at most 63 characters (66): it names",
            id="too long",
        ),
        pytest.param(
            {"name": "team.train", "podGroup": "workers"},
            "field spec.workloadRef gives group name 'team.train-workers' (name-podGroup), "
            "which is not a lower-case DNS label",
            id="a dotted Workload name",
        ),
        pytest.param(
            {"name": "7train", "podGroup": "workers"},
            "field spec.workloadRef gives group name '7train-workers'",
            id="starts with a digit",
        ),
    ],
)
def test_an_unusable_workload_ref_is_a_clear_error(ref: object, message: str) -> None:
    with pytest.raises(m.MembershipError) as err:
        m.group_name({"name": "p"}, {"workloadRef": ref})
    assert str(err.value).startswith(message), str(err.value)


def test_the_too_long_message_says_what_to_shorten() -> None:
    ref = {"name": "a" * 60, "podGroup": "workers"}
    with pytest.raises(m.MembershipError) as err:
        m.workload_ref({"workloadRef": ref})
    assert str(err.value).endswith(
        "(68): it names the group's headless Service and every member's subdomain; "
        "shorten the Workload or pod group name"
    )


def test_exactly_63_characters_is_a_group() -> None:
    ref = m.workload_ref({"workloadRef": {"name": "a" * 55, "podGroup": "workers"}})
    assert ref is not None and len(ref.group) == 63


def test_a_label_naming_another_group_than_the_workload_ref_is_an_error() -> None:
    pod = PodInfo.from_api(
        ref_pod(
            "w-0", {"name": "train", "podGroup": "workers"}, **{m.VOLCANO_GROUP_ANNOTATION: "x"}
        )
    )
    assert pod.group is None
    assert pod.group_error == (
        "pod claims two groups (annotation scheduling.k8s.io/group-name='x', "
        "field spec.workloadRef='train-workers'); set one group name in all of them"
    )


def test_a_pod_with_only_the_workload_ref_is_a_member_of_its_gang() -> None:
    pod = PodInfo.from_api(ref_pod("w-0", {"name": "train", "podGroup": "workers"}))
    assert (pod.group, pod.group_error) == (m.GroupKey("ml", "train-workers"), None)
    assert pod.is_active_member


def test_the_webhook_denies_a_too_long_workload_ref_with_the_reason() -> None:
    # Reached only when the pod also carries a group label or annotation (matchConditions).
    pod = ref_pod("w-0", {"name": "a" * 60, "podGroup": "workers"})
    with pytest.raises(AdmissionDenied) as err:
        pod_group(pod)
    assert "shorten the Workload or pod group name" in str(err.value)


# ---- Volcano's own spelling of the group annotation ----


@pytest.mark.parametrize(
    ("annotations", "group"),
    [
        pytest.param({m.VOLCANO_OWN_GROUP_ANNOTATION: "mpi"}, "mpi", id="volcano's alone"),
        pytest.param(
            {m.VOLCANO_OWN_GROUP_ANNOTATION: "mpi", m.VOLCANO_GROUP_ANNOTATION: "mpi"},
            "mpi",
            id="both, agreeing (as Volcano's job controller sets them)",
        ),
        pytest.param({m.VOLCANO_OWN_GROUP_ANNOTATION: ""}, None, id="empty"),
    ],
)
def test_volcanos_group_name_annotation_names_the_group(
    annotations: dict[str, str], group: str | None
) -> None:
    assert m.group_name({"annotations": annotations}) == group


def test_volcanos_two_annotations_disagreeing_is_the_two_groups_error() -> None:
    annotations = {m.VOLCANO_GROUP_ANNOTATION: "a", m.VOLCANO_OWN_GROUP_ANNOTATION: "b"}
    with pytest.raises(m.MembershipError) as err:
        m.group_name({"annotations": annotations})
    assert str(err.value) == (
        "pod claims two groups (annotation scheduling.k8s.io/group-name='a', "
        "annotation scheduling.volcano.sh/group-name='b'); set one group name in all of them"
    )


def webhook_conditions(path: Path) -> dict[str, str]:
    text = path.read_text()
    text = "\n".join(line for line in text.splitlines() if "{{" not in line)
    found: dict[str, str] = {}
    for doc in yaml.safe_load_all(text):
        for hook in (doc or {}).get("webhooks") or []:
            for condition in hook.get("matchConditions") or []:
                found[condition["name"]] = condition["expression"]
    return found


@pytest.mark.parametrize(
    "path",
    [REPO / "deploy" / "webhook.yaml", REPO / "charts/gang-extender/templates/webhook.yaml"],
    ids=["deploy", "chart"],
)
def test_the_webhook_is_sent_pods_naming_a_group_by_either_volcano_annotation_or_spec(
    path: Path,
) -> None:
    conditions = webhook_conditions(path)
    for name in ("names-a-group", "names-no-group"):
        for key in (m.VOLCANO_GROUP_ANNOTATION, m.VOLCANO_OWN_GROUP_ANNOTATION):
            assert f"'{key}' in object.metadata.annotations" in conditions[name], (name, key)
        for field in (m.UPSTREAM_GROUP_FIELD.split(".")[1], m.WORKLOAD_REF_FIELD.split(".")[1]):
            assert f"has(object.spec.{field})" in conditions[name], (name, field)
    # The GPU-routing hook takes exactly the pods the group hook does not.
    assert conditions["names-no-group"] == f"!({conditions['names-a-group']})"


# ---- the Workload's pod group entry sizes the gang ----

REF = m.WorkloadRef("train", "workers")


@pytest.mark.parametrize(
    ("entries", "ref", "min_member", "error"),
    [
        pytest.param([gang("workers", 4)], REF, 4, None, id="gang minCount"),
        pytest.param([gang("launcher", 1), gang("workers", 8)], REF, 8, None, id="the named entry"),
        pytest.param(
            [gang("workers", 3)],
            m.WorkloadRef("train", "workers", "r2"),
            3,
            None,
            id="each replica has the entry's size",
        ),
        pytest.param(
            [{"name": "workers", "policy": {"basic": {}}}], REF, 1, None, id="basic is size 1"
        ),
        pytest.param([gang("workers", 1)], REF, 1, None, id="minCount 1, the smallest"),
        pytest.param(
            [{"name": "workers", "policy": "gang"}],
            REF,
            1,
            "upstream Workload train sets neither spec.podGroups[workers].policy.gang nor "
            "spec.podGroups[workers].policy.basic",
            id="policy not an object",
        ),
        pytest.param(
            [gang("workers", 0)],
            REF,
            1,
            "upstream Workload train spec.podGroups[workers].policy.gang.minCount=0 "
            "must be a whole number >= 1",
            id="minCount 0",
        ),
        pytest.param(
            [gang("workers", "4")],
            REF,
            1,
            "upstream Workload train spec.podGroups[workers].policy.gang.minCount='4' "
            "must be a whole number >= 1",
            id="minCount a string",
        ),
        pytest.param(
            [gang("workers", True)],
            REF,
            1,
            "upstream Workload train spec.podGroups[workers].policy.gang.minCount=True "
            "must be a whole number >= 1",
            id="minCount a bool",
        ),
        pytest.param(
            [{"name": "workers", "policy": {}}],
            REF,
            1,
            "upstream Workload train sets neither spec.podGroups[workers].policy.gang nor "
            "spec.podGroups[workers].policy.basic",
            id="no policy",
        ),
        pytest.param(
            [gang("launcher", 1), gang("driver", 1)],
            REF,
            1,
            "pods name pod group 'workers' of upstream Workload train in "
            "spec.workloadRef.podGroup, but its spec.podGroups has no entry of that name "
            "(it has 'launcher', 'driver'); fix the pods' spec.workloadRef or recreate the "
            "Workload with that entry",
            id="a ref to a missing entry",
        ),
        pytest.param(
            [],
            REF,
            1,
            "pods name pod group 'workers' of upstream Workload train in "
            "spec.workloadRef.podGroup, but its spec.podGroups has no entry of that name "
            "(it has none); fix the pods' spec.workloadRef or recreate the Workload with "
            "that entry",
            id="no entries",
        ),
    ],
)
def test_the_workloads_pod_group_entry_sizes_the_gang(
    entries: list[dict[str, Any]], ref: m.WorkloadRef, min_member: int, error: str | None
) -> None:
    spec = upstream_workload_spec(workload("train", *entries), ref)
    assert spec == GroupSpec(
        key=m.GroupKey("ml", ref.group),
        min_member=min_member,
        source=UPSTREAM_WORKLOAD_SOURCE,
        error=error,
    )


@pytest.mark.parametrize("pod_groups", [None, {"workers": {}}, "workers"], ids=repr)
def test_a_workload_whose_pod_groups_are_not_a_list_has_no_entries(pod_groups: object) -> None:
    obj = workload("train")
    obj["spec"]["podGroups"] = pod_groups
    spec = upstream_workload_spec(obj, REF)
    assert spec.min_member == 1
    assert spec.error is not None and "(it has none)" in spec.error


def test_a_workload_without_a_namespace_is_in_default() -> None:
    obj = workload("train", gang("workers", 2))
    del obj["metadata"]["namespace"]
    assert upstream_workload_spec(obj, REF).key == m.GroupKey("default", "train-workers")


def test_a_podgroup_of_the_same_name_that_disagrees_holds_the_group() -> None:
    ours = GroupSpec(key=m.GroupKey("ml", "train-workers"), min_member=2, source="PodGroup")
    theirs = upstream_workload_spec(workload("train", gang("workers", 4)), REF)
    picked = pick_podgroup([ours, theirs])
    assert picked is not None and picked.error == (
        "scheduling.gang-extender.io PodGroup train-workers (minMember 2) and scheduling.k8s.io "
        "Workload pod group train-workers (minCount 4) disagree; delete the one you do not "
        "use, or make them agree"
    )


def test_a_short_gang_says_where_its_size_comes_from() -> None:
    spec = upstream_workload_spec(workload("train", gang("workers", 4)), REF)
    assert _waiting_message(spec.key, spec, 3) == (
        "gang ml/train-workers: 3/4 members exist; waiting for the rest to be created (if "
        "the job creates fewer than 4 pods, set policy.gang.minCount of the pod group in the "
        "pods' scheduling.k8s.io Workload (spec.workloadRef) to the number it creates)"
    )


# ---- the cluster state: the Workload's gangs follow their pods and the Workload ----


TRAIN = workload("train", gang("workers", 4), {"name": "ps", "policy": {"basic": {}}})
WORKERS = m.GroupKey("ml", "train-workers")


def sizes(state: ClusterState, *keys: m.GroupKey) -> list[tuple[int, str | None] | None]:
    found = [state.core.snapshot.group_spec(key) for key in keys]
    return [(s.min_member, s.error) if s is not None else None for s in found]


@pytest.mark.parametrize("workload_first", [True, False], ids=["workload first", "pods first"])
def test_the_workload_sizes_the_gang_of_its_pods_in_either_order(workload_first: bool) -> None:
    state = make_cluster_state()
    pod = ref_pod("w-0", {"name": "train", "podGroup": "workers"})
    if workload_first:
        state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
        state.on_event("pods", "ADDED", pod)
    else:
        state.on_event("pods", "ADDED", pod)
        assert sizes(state, WORKERS) == [None]  # no Workload yet: nothing says how many
        state.on_event(UPSTREAM_WORKLOADS.kind, "ADDED", TRAIN)
    spec = state.core.snapshot.group_spec(WORKERS)
    assert spec is not None and (spec.min_member, spec.source) == (4, UPSTREAM_WORKLOAD_SOURCE)
    assert state.podgroup_object(WORKERS) is TRAIN
    assert [p.name for p in state.core.snapshot.members(WORKERS)] == ["w-0"]
    assert WORKERS in state.dirty


def test_each_replica_key_is_a_gang_of_the_entrys_size() -> None:
    state = make_cluster_state()
    state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
    for replica in ("a", "b"):
        for i in range(2):
            ref = {"name": "train", "podGroup": "workers", "podGroupReplicaKey": replica}
            state.on_event("pods", "ADDED", ref_pod(f"{replica}-{i}", ref))
    a, b = m.GroupKey("ml", "train-workers-a"), m.GroupKey("ml", "train-workers-b")
    assert sizes(state, a, b, WORKERS) == [(4, None), (4, None), None]
    assert [p.name for p in state.core.snapshot.members(a)] == ["a-0", "a-1"]


def test_a_ref_to_a_missing_entry_holds_the_gang_with_the_reason() -> None:
    state = make_cluster_state()
    state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
    state.on_event("pods", "ADDED", ref_pod("w-0", {"name": "train", "podGroup": "evaluators"}))
    [(size, error)] = sizes(state, m.GroupKey("ml", "train-evaluators"))  # type: ignore[misc]
    assert size == 1 and error is not None
    assert error.startswith("pods name pod group 'evaluators' of upstream Workload train")
    assert "(it has 'workers', 'ps')" in error


def test_a_changed_workload_resizes_its_gangs() -> None:
    state = make_cluster_state()
    state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
    state.on_event("pods", "ADDED", ref_pod("w-0", {"name": "train", "podGroup": "workers"}))
    state.dirty.clear()
    state.on_event(UPSTREAM_WORKLOADS.kind, "MODIFIED", workload("train", gang("workers", 2)))
    assert sizes(state, WORKERS) == [(2, None)]
    assert WORKERS in state.dirty


@pytest.mark.parametrize("how", ["deleted", "missing from a relist"])
def test_without_its_workload_the_gang_has_no_size(how: str) -> None:
    state = make_cluster_state()
    state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
    state.on_event("pods", "ADDED", ref_pod("w-0", {"name": "train", "podGroup": "workers"}))
    if how == "deleted":
        state.on_event(UPSTREAM_WORKLOADS.kind, "DELETED", TRAIN)
    else:
        state.on_page(UPSTREAM_WORKLOADS.kind, [], True, True)
    assert sizes(state, WORKERS) == [None]
    assert state.podgroup_object(WORKERS) is None
    assert state.workloads == {}
    # ...and it comes back with the Workload, for the pods that are still there.
    state.on_event(UPSTREAM_WORKLOADS.kind, "ADDED", TRAIN)
    assert sizes(state, WORKERS) == [(4, None)]


def test_a_gang_whose_last_pod_is_gone_is_forgotten() -> None:
    state = make_cluster_state()
    state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
    ref = {"name": "train", "podGroup": "workers", "podGroupReplicaKey": "r0"}
    pod = ref_pod("w-0", ref)
    state.on_event("pods", "ADDED", pod)
    key = m.GroupKey("ml", "train-workers-r0")
    assert sizes(state, key) == [(4, None)]
    state.on_event("pods", "DELETED", pod)
    assert sizes(state, key) == [None]
    assert key not in state.core.snapshot.group_keys()
    assert state.workload_groups == {}


def test_a_pod_naming_its_group_also_by_label_is_sized_by_the_workload() -> None:
    state = make_cluster_state()
    state.on_page(UPSTREAM_WORKLOADS.kind, [TRAIN], True, True)
    pod = ref_pod("w-0", {"name": "train", "podGroup": "workers"})
    pod["metadata"]["labels"] = {m.GROUP_LABEL: "train-workers"}
    state.on_event("pods", "ADDED", pod)
    assert sizes(state, WORKERS) == [(4, None)]


# ---- the watch cache: the Workload kind is optional ----


class WorkloadApi:
    def __init__(self, served: bool) -> None:
        self.served = served
        self.listed: list[str] = []
        self.watching = threading.Event()

    def call(
        self, method: str, path: str, *, query: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        self.listed.append(path)
        if not self.served:
            raise KubeError(404, "the server could not find the requested resource")
        return {"metadata": {"resourceVersion": "7"}, "items": [TRAIN]}

    def stream(
        self, path: str, *, query: dict[str, Any], read_timeout: float
    ) -> Iterator[dict[str, Any]]:
        self.watching.set()
        threading.Event().wait(3600)
        yield {}


@pytest.mark.parametrize("served", [True, False], ids=["served", "not served"])
def test_the_cache_reads_workloads_only_where_served(served: bool) -> None:
    api = WorkloadApi(served)
    sink = PageNamesSink()
    watcher = Watcher(api, UPSTREAM_WORKLOADS, sink, ImmediateLoop(), Metrics(), PAGED)  # type: ignore[arg-type]
    watcher.start()
    assert watcher.synced.wait(10)
    watcher.stop()
    assert api.listed[0] == "/apis/scheduling.k8s.io/v1alpha1/workloads"
    assert watcher.absent is not served
    assert sink.pages == ([["train"]] if served else [])


# ---- gang-extender status ----


def _member(name: str, *, node: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    pod = ref_pod(name, {"name": "train", "podGroup": "workers"})
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


def test_status_sizes_a_workload_ref_gang_by_its_workloads_entry() -> None:
    from extender.status_report import SOURCE_UPSTREAM
    from extender.status_view import STATUS_HEADER
    from tests.builders import status_rows

    pods = [_member("w0", node="n1", phase="Running"), _member("w1", node="n1"), _member("w2")]
    rows = status_rows([], [], pods, [], workloads=[TRAIN])
    (found,) = [r for r in rows[1:] if r[1] == "train-workers"]
    row = dict(zip(STATUS_HEADER, found, strict=True))
    assert (row["NAMESPACE"], row["PHASE"], row["PLACED/MIN"], row["RUNNING"]) == (
        "ml",
        "Pending",
        "2/4",
        "1",
    )
    assert row["SOURCE"] == SOURCE_UPSTREAM


def test_status_without_the_workload_or_its_entry_shows_no_size() -> None:
    from extender.status_report import SOURCE_PODS, SOURCE_UPSTREAM
    from tests.builders import status_rows

    pods = [_member("w0")]
    unsized = status_rows([], [], pods, [], workloads=[])
    assert [(r[1], r[3], r[5]) for r in unsized[1:]] == [("train-workers", "0/?", SOURCE_PODS)]
    other = workload("train", gang("ps", 2))  # no "workers" entry: the service holds it
    wrong = status_rows([], [], pods, [], workloads=[other])
    assert [(r[1], r[3], r[5]) for r in wrong[1:]] == [("train-workers", "0/?", SOURCE_UPSTREAM)]


def test_the_status_command_lists_the_135_workloads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gang-extender status` asks for scheduling.k8s.io/v1alpha1 workloads and sizes the
    gang with them; a cluster that does not serve them (404) is no error."""
    from extender import cli
    from extender.kube import status_reads

    served: dict[str, list[dict[str, Any]]] = {
        "/apis/scheduling.k8s.io/v1alpha1/workloads": [TRAIN],
        "/api/v1/pods": [_member("w0", node="n1"), _member("w1", node="n1")],
        "/apis/scheduling.gang-extender.io/v1alpha1/podgroups": [],
    }
    asked: list[str] = []

    class ServedApi:
        def __init__(self, client: Any) -> None:
            pass

        def call(self, method: str, path: str, **_: Any) -> dict[str, Any]:
            asked.append(path)
            if path not in served and not path.endswith("/events"):
                raise KubeError(404, "not found")
            return {"items": served.get(path, [])}

    monkeypatch.setattr(status_reads, "connect", lambda kubeconfig: (ServedApi(None), "test"))
    assert cli.main(["status", "--kubeconfig", "/dev/null"]) == 0
    assert "/apis/scheduling.k8s.io/v1alpha1/workloads" in asked
    rows = capsys.readouterr().out.splitlines()
    (line,) = [r for r in rows if "train-workers" in r]
    assert "2/4" in line.split() and "kubernetes" in line.split()

    del served["/apis/scheduling.k8s.io/v1alpha1/workloads"]  # 1.36 on: not served
    assert cli.main(["status", "--kubeconfig", "/dev/null"]) == 0
    (line,) = [r for r in capsys.readouterr().out.splitlines() if "train-workers" in r]
    assert "2/?" in line.split()
