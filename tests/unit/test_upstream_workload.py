"""Kubernetes' own Workload API as a group source, and the wiring-only mode (table tests).

The JSON shapes are those of k8s.io/api v0.37.2 (core/v1 PodSpec.SchedulingGroup,
scheduling/v1beta1 PodGroup), as kube-apiserver v1.37.2 returns them; the PodGroup
below is a real answer of that server (with its defaulted disruptionMode and priority).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from extender.config import Settings
from extender.domain.objects import membership as m
from extender.domain.objects.model import (
    UPSTREAM_PODGROUP_SOURCE,
    GroupSpec,
    PodInfo,
    upstream_podgroup_spec,
)
from extender.injection.admission import AdmissionDenied, pod_group
from extender.kube.cache import Watcher
from extender.kube.rawapi import KubeError
from extender.kube.resources import UPSTREAM_PODGROUPS
from extender.listeners import EXTENDER, METRICS, WEBHOOK, listeners
from extender.metrics import Metrics
from tests.builders import (
    ImmediateLoop,
    PageNamesSink,
    make_cluster_state,
    make_podgroup,
    spec_member,
)
from tests.watch_fakes import PAGED

# kube-apiserver v1.37.2's answer to creating this PodGroup (managedFields left out).
SERVED_PODGROUP: dict[str, Any] = {
    "kind": "PodGroup",
    "apiVersion": "scheduling.k8s.io/v1beta1",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": "6c2496b0-1163-46d6-8858-409e7923f0cb",
        "resourceVersion": "269",
        "finalizers": ["scheduling.k8s.io/podgroup-protection"],
    },
    "spec": {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "disruptionMode": {"single": {}},
        "priority": 0,
    },
    "status": {},
}


def upstream_pod(name: str, group: object, **labels: str) -> dict[str, Any]:
    return spec_member(name, labels=labels, schedulingGroup={"podGroupName": group})


def upstream_podgroup(name: str, policy: object) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulingPolicy": policy},
    }


# ---- the pod's reference ----


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"schedulingGroup": {"podGroupName": "train"}}, "train", id="podGroupName"),
        pytest.param({}, None, id="no schedulingGroup"),
        pytest.param({"schedulingGroup": None}, None, id="schedulingGroup null"),
        pytest.param({"schedulingGroup": {}}, None, id="schedulingGroup without a name"),
        pytest.param({"schedulingGroup": {"podGroupName": ""}}, None, id="empty name"),
        pytest.param({"schedulingGroup": {"podGroupName": 7}}, None, id="name not a string"),
        pytest.param({"schedulingGroup": "train"}, None, id="schedulingGroup not an object"),
        # 1.35's alpha field (tombstoned in 1.36): read too, as <workload>-<podGroup>
        # (tests/unit/test_workload_v135.py).
        pytest.param({"workloadRef": {"name": "w", "podGroup": "g"}}, "w-g", id="1.35 workloadRef"),
    ],
)
def test_the_pods_scheduling_group_names_its_group(
    spec: dict[str, Any], expected: str | None
) -> None:
    assert m.group_name({"name": "p"}, spec) == expected


def test_without_the_spec_only_metadata_is_read() -> None:
    assert m.group_name({"labels": {}}) is None


def test_a_label_agreeing_with_the_scheduling_group_is_one_group() -> None:
    spec = {"schedulingGroup": {"podGroupName": "train"}}
    assert m.group_name({"labels": {m.GROUP_LABEL: "train"}}, spec) == "train"


def test_a_label_and_a_scheduling_group_naming_different_groups_is_an_error() -> None:
    spec = {"schedulingGroup": {"podGroupName": "train"}}
    with pytest.raises(m.MembershipError) as err:
        m.group_name({"labels": {m.GROUP_LABEL: "other"}}, spec)
    assert str(err.value) == (
        "pod claims two groups (label gang-extender.io/group='other', "
        "field spec.schedulingGroup.podGroupName='train'); set one group name in all of them"
    )


def test_a_pod_with_only_the_upstream_reference_is_a_member() -> None:
    pod = PodInfo.from_api(upstream_pod("w-0", "train"))
    assert pod.group == m.GroupKey("ml", "train")
    assert pod.group_error is None
    assert pod.is_active_member


def test_a_pod_claiming_two_groups_through_the_label_and_the_field_carries_the_error() -> None:
    pod = PodInfo.from_api(upstream_pod("w-0", "train", **{m.COSCHEDULING_GROUP_LABEL: "x"}))
    assert pod.group is None
    assert pod.group_error is not None and "two groups" in pod.group_error


def test_the_webhook_sees_the_upstream_reference_and_denies_two_groups() -> None:
    assert pod_group(upstream_pod("w-0", "train")) == "train"
    with pytest.raises(AdmissionDenied, match="two groups"):
        pod_group(upstream_pod("w-0", "train", **{m.GROUP_LABEL: "x"}))


# ---- the PodGroup's gang policy ----


@pytest.mark.parametrize(
    ("policy", "min_member", "error"),
    [
        pytest.param({"gang": {"minCount": 4}}, 4, None, id="gang minCount 4"),
        pytest.param({"gang": {"minCount": 1}}, 1, None, id="gang minCount 1"),
        pytest.param({"basic": {}}, 1, None, id="basic: no gang"),
        pytest.param(
            {"gang": {"minCount": 0}},
            1,
            "upstream PodGroup train spec.schedulingPolicy.gang.minCount=0 "
            "must be a whole number >= 1",
            id="minCount 0",
        ),
        pytest.param(
            {"gang": {"minCount": "4"}},
            1,
            "upstream PodGroup train spec.schedulingPolicy.gang.minCount='4' "
            "must be a whole number >= 1",
            id="minCount a string",
        ),
        pytest.param(
            {"gang": {"minCount": True}},
            1,
            "upstream PodGroup train spec.schedulingPolicy.gang.minCount=True "
            "must be a whole number >= 1",
            id="minCount a boolean",
        ),
        pytest.param(
            {"gang": {}},
            1,
            "upstream PodGroup train spec.schedulingPolicy.gang.minCount=None "
            "must be a whole number >= 1",
            id="gang without minCount",
        ),
        pytest.param(
            {},
            1,
            "upstream PodGroup train sets neither spec.schedulingPolicy.gang "
            "nor spec.schedulingPolicy.basic",
            id="empty policy",
        ),
        pytest.param(
            None,
            1,
            "upstream PodGroup train sets neither spec.schedulingPolicy.gang "
            "nor spec.schedulingPolicy.basic",
            id="no policy",
        ),
    ],
)
def test_the_gang_policy_gives_the_group_size(
    policy: object, min_member: int, error: str | None
) -> None:
    spec = upstream_podgroup_spec(upstream_podgroup("train", policy))
    assert spec == GroupSpec(
        key=m.GroupKey("ml", "train"),
        min_member=min_member,
        source=UPSTREAM_PODGROUP_SOURCE,
        error=error,
        disrupted_whole=False,  # no disruptionMode: the API's default, Single
    )


@pytest.mark.parametrize(
    ("mode", "disrupted_whole", "error"),
    [
        pytest.param({"all": {}}, True, None, id="all"),
        pytest.param({"single": {}}, False, None, id="single"),
        pytest.param(None, False, None, id="unset: the API's default, single"),
        pytest.param(
            "All",
            True,
            "upstream PodGroup train spec.disruptionMode='All' must be {single: {}} or {all: {}}",
            id="a string",
        ),
        pytest.param(
            {"pod": {}},
            True,
            "upstream PodGroup train spec.disruptionMode={'pod': {}} must be {single: {}} or "
            "{all: {}}",
            id="an unknown mode",
        ),
    ],
)
def test_the_disruption_mode_says_whether_members_are_preempted_together(
    mode: object, disrupted_whole: bool, error: str | None
) -> None:
    obj = upstream_podgroup("train", {"gang": {"minCount": 2}})
    if mode is not None:
        obj["spec"]["disruptionMode"] = mode
    spec = upstream_podgroup_spec(obj)
    assert (spec.disrupted_whole, spec.error) == (disrupted_whole, error)


def test_an_upstream_podgroup_without_a_namespace_is_in_default() -> None:
    obj = upstream_podgroup("train", {"gang": {"minCount": 2}})
    obj["metadata"].pop("namespace", None)
    assert upstream_podgroup_spec(obj).key == m.GroupKey("default", "train")


def test_a_podgroup_as_the_api_server_returns_it() -> None:
    spec = upstream_podgroup_spec(SERVED_PODGROUP)
    assert (spec.key, spec.min_member, spec.error) == (m.GroupKey("ml", "train"), 4, None)


# ---- the cluster state and the snapshot ----


def test_an_upstream_podgroup_sizes_the_group_of_its_pods_and_goes_with_its_deletion() -> None:
    state = make_cluster_state()
    key = m.GroupKey("ml", "train")
    state.on_page(UPSTREAM_PODGROUPS.kind, [SERVED_PODGROUP], True, True)
    state.on_event("pods", "ADDED", upstream_pod("w-0", "train"))
    spec = state.core.snapshot.group_spec(key)
    assert spec is not None and (spec.min_member, spec.source) == (4, UPSTREAM_PODGROUP_SOURCE)
    assert state.podgroup_object(key) is SERVED_PODGROUP
    assert [p.name for p in state.core.snapshot.members(key)] == ["w-0"]
    state.on_event(UPSTREAM_PODGROUPS.kind, "DELETED", SERVED_PODGROUP)
    assert state.core.snapshot.group_spec(key) is None
    assert state.podgroup_object(key) is None


def test_a_relist_without_the_podgroup_forgets_it() -> None:
    state = make_cluster_state()
    key = m.GroupKey("ml", "train")
    state.on_page(UPSTREAM_PODGROUPS.kind, [SERVED_PODGROUP], True, True)
    state.on_page(UPSTREAM_PODGROUPS.kind, [], True, True)
    assert state.core.snapshot.podgroup(key) is None


def test_our_podgroup_and_an_upstream_one_of_the_same_name_that_disagree_hold_the_group() -> None:
    state = make_cluster_state()
    key = m.GroupKey("ml", "train")
    ours = make_podgroup("train", 2, namespace="ml")
    state.on_page(UPSTREAM_PODGROUPS.kind, [SERVED_PODGROUP], True, True)
    state.on_page("podgroups", [ours], True, True)
    spec = state.core.snapshot.group_spec(key)
    assert spec is not None and spec.error == (
        "scheduling.gang-extender.io PodGroup train (minMember 2) and scheduling.k8s.io "
        "PodGroup train (minCount 4) disagree; delete the one you do not use, or make them agree"
    )
    assert state.podgroup_object(key) is ours


def test_our_podgroup_and_an_upstream_one_that_agree_are_one_group() -> None:
    state = make_cluster_state()
    key = m.GroupKey("ml", "train")
    ours = make_podgroup("train", 4, namespace="ml")
    state.on_page(UPSTREAM_PODGROUPS.kind, [SERVED_PODGROUP], True, True)
    state.on_page("podgroups", [ours], True, True)
    spec = state.core.snapshot.group_spec(key)
    assert spec is not None and (spec.min_member, spec.source, spec.error) == (4, "PodGroup", None)


# ---- the watch cache finds the served version ----


class VersionedApi:
    """Serves podgroups at `served` paths only; `refuse` answers with that status instead."""

    def __init__(self, served: tuple[str, ...], refuse: int = 404) -> None:
        self.served = served
        self.refuse = refuse
        self.listed: list[str] = []
        self.watched: list[str] = []
        self.watching = threading.Event()

    def call(
        self, method: str, path: str, *, query: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        self.listed.append(path)
        if path not in self.served:
            raise KubeError(self.refuse, "the server could not find the requested resource")
        return {"metadata": {"resourceVersion": "7"}, "items": [SERVED_PODGROUP]}

    def stream(
        self, path: str, *, query: dict[str, Any], read_timeout: float
    ) -> Iterator[dict[str, Any]]:
        self.watched.append(path)
        self.watching.set()
        threading.Event().wait(3600)
        yield {}


def test_the_cache_lists_and_watches_the_first_served_version() -> None:
    v1alpha2 = "/apis/scheduling.k8s.io/v1alpha2/podgroups"
    api = VersionedApi(served=(v1alpha2,))
    sink = PageNamesSink()
    watcher = Watcher(api, UPSTREAM_PODGROUPS, sink, ImmediateLoop(), Metrics(), PAGED)  # type: ignore[arg-type]
    watcher.start()
    assert api.watching.wait(10)
    watcher.stop()
    assert api.listed == list(UPSTREAM_PODGROUPS.paths)
    assert api.watched == [v1alpha2]
    assert sink.pages == [["train"]]
    assert watcher.synced.is_set() and not watcher.absent


@pytest.mark.parametrize("status", [404, 403], ids=["not served", "not permitted"])
def test_a_cluster_without_the_api_is_synced_with_nothing_read(status: int) -> None:
    api = VersionedApi(served=(), refuse=status)
    sink = PageNamesSink()
    watcher = Watcher(api, UPSTREAM_PODGROUPS, sink, ImmediateLoop(), Metrics(), PAGED)  # type: ignore[arg-type]
    watcher.start()
    assert watcher.synced.wait(10)
    watcher.stop()
    assert watcher.absent
    assert sink.pages == [] and api.watched == []
    expected = list(UPSTREAM_PODGROUPS.paths) if status == 404 else [UPSTREAM_PODGROUPS.path]
    assert api.listed[: len(expected)] == expected


# ---- the mode switch ----


def test_full_mode_opens_every_listener() -> None:
    assert Settings().mode == "full"
    assert listeners(Settings()) == (EXTENDER, WEBHOOK, METRICS)


def test_wiring_only_mode_opens_no_extender_listener() -> None:
    assert listeners(Settings(mode="wiring-only")) == (WEBHOOK, METRICS)


def test_the_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANG_MODE", "wiring-only")
    assert Settings().mode == "wiring-only"


def test_an_unknown_mode_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValidationError, match="'full' or 'wiring-only'"):
        Settings(mode="scheduler-only")  # type: ignore[arg-type]


def test_listed_items_get_the_apiversion_and_kind_of_their_list() -> None:
    """kube-apiserver leaves TypeMeta out of a built-in kind's list items; the wiring's
    ownerReference to an upstream PodGroup needs it."""
    item = {"metadata": {"name": "train", "namespace": "ml", "uid": "u"}, "spec": {}}

    class ListApi(VersionedApi):
        def call(
            self, method: str, path: str, *, query: dict[str, Any], timeout: float
        ) -> dict[str, Any]:
            self.listed.append(path)
            return {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroupList",
                "metadata": {"resourceVersion": "7"},
                "items": [item],
            }

    api = ListApi(served=())
    watcher = Watcher(api, UPSTREAM_PODGROUPS, PageNamesSink(), ImmediateLoop(), Metrics(), PAGED)  # type: ignore[arg-type]
    watcher.start()
    assert api.watching.wait(10)
    watcher.stop()
    assert (item["apiVersion"], item["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")


# ---- wiring-only: the reconciler wires, and leaves reporting to the other scheduler ----


def _service(mode: str) -> tuple[Any, Any, Any]:
    from extender.service import Deps, create_service
    from tests.unit.test_service_effects import FakeRaw, FakeWiring

    raw, wiring = FakeRaw(), FakeWiring()
    settings = Settings(mode=mode, webhook_config_name=None)  # type: ignore[arg-type]
    return create_service(settings, Deps(raw=raw, wiring=wiring)), raw, wiring  # type: ignore[arg-type]


def _observe_waiting_group(svc: Any) -> None:
    from tests.builders import make_pod, make_podgroup

    namespace = {"metadata": {"name": "default", "labels": {m.INJECT_NAMESPACE_LABEL: "enabled"}}}
    podgroup = make_podgroup("job", 2)
    podgroup["metadata"]["resourceVersion"] = "1"
    svc.state.on_page("namespaces", [namespace], True, False)
    svc.state.on_page("podgroups", [podgroup], True, False)
    svc.state.on_page("pods", [make_pod("w0").group("job").obj()], True, False)


@pytest.mark.parametrize(
    ("mode", "reports"), [("full", True), ("wiring-only", False)], ids=["full", "wiring-only"]
)
async def test_wiring_only_wires_but_writes_no_status_and_no_waiting_event(
    mode: str, reports: bool
) -> None:
    svc, raw, wiring = _service(mode)
    try:
        assert svc.reconciler.schedules is reports
        _observe_waiting_group(svc)
        await svc.reconciler.reconcile_group(m.GroupKey("default", "job"))
        await svc.queues.join()
        assert wiring.calls == 1  # the Secret, Service and ConfigMap are made in both modes
        assert bool(raw.status_patches("job")) is reports
        assert bool(raw.events("GangWaiting")) is reports
    finally:
        svc.binder.close()


# ---- the dev control plane's feature gates (used by tests/e2e/test_upstream_workload.py) ----


def _bin_dir(tmp_path: Any) -> Any:
    from extender.devcluster.cluster import REQUIRED_BINARIES

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in REQUIRED_BINARIES:
        (bin_dir / name).write_text("")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_feature_gates_are_given_per_component(tmp_path: Any) -> None:
    from extender.devcluster.cluster import LocalCluster

    cluster = LocalCluster(
        tmp_path / "c",
        _bin_dir(tmp_path),
        feature_gates={"kube-apiserver": {"GenericWorkload": True, "B": False}},
        runtime_config=["scheduling.k8s.io/v1beta1=true"],
    )
    assert cluster.commands.gate_flags("kube-apiserver") == [
        "--feature-gates=B=false,GenericWorkload=true"
    ]
    assert cluster.commands.gate_flags("kube-scheduler") == []
    assert cluster.runtime_config == ("scheduling.k8s.io/v1beta1=true",)


def test_feature_gates_for_a_component_that_is_not_run_are_refused(tmp_path: Any) -> None:
    from extender.devcluster.cluster import ClusterError, LocalCluster

    with pytest.raises(ClusterError, match="unknown components: \\['kubelet'\\]"):
        LocalCluster(tmp_path / "c", _bin_dir(tmp_path), feature_gates={"kubelet": {"X": True}})


# ---- `gang-extender status` lists upstream groups with their size ----


def _status_pod(name: str, *, node: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    pod = upstream_pod(name, "train")
    pod["metadata"]["namespace"] = "ml"
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


def test_status_shows_an_upstream_group_with_its_min_count() -> None:
    from extender.status_report import NO_WORD, SOURCE_UPSTREAM
    from extender.status_view import STATUS_HEADER
    from tests.builders import status_rows

    pods = [
        _status_pod("train-0", node="n1", phase="Running"),
        _status_pod("train-1", node="n1", phase="Running"),
        _status_pod("train-2"),
    ]
    rows = status_rows([], [], pods, [], upstream=[SERVED_PODGROUP])
    (found,) = [r for r in rows[1:] if r[1] == "train"]
    assert dict(zip(STATUS_HEADER, found, strict=True)) == {
        "NAMESPACE": "ml",
        "NAME": "train",
        "PHASE": "Pending",
        "PLACED/MIN": "2/4",
        "RUNNING": "2",
        "SOURCE": SOURCE_UPSTREAM,
        "QUEUE": "1",
        "PRIORITY": "0",
        # Nothing from the service on it (no Event, no Lease to read): said, not left blank.
        "WAITING FOR": NO_WORD,
    }


def test_status_without_upstream_podgroups_shows_the_group_from_its_pods() -> None:
    from extender.status_report import SOURCE_PODS
    from tests.builders import status_rows

    rows = status_rows([], [], [_status_pod("train-0")], [])
    assert [(r[1], r[3], r[5]) for r in rows[1:]] == [("train", "0/?", SOURCE_PODS)]


def test_a_child_of_a_composite_podgroup_is_held_saying_why_and_what_to_do() -> None:
    obj = upstream_podgroup("train", {"gang": {"minCount": 2}})
    obj["spec"]["parentCompositePodGroupName"] = "job-root"
    spec = upstream_podgroup_spec(obj)
    assert spec.error == (
        "upstream PodGroup train is a child of CompositePodGroup 'job-root' "
        "(spec.parentCompositePodGroupName): gang-extender places each PodGroup as a gang "
        "of its own and not a composite's minGroupCount groups together, so it holds the "
        "group; run it with Kubernetes' gang scheduling (gang-extender in wiring-only "
        "mode) or create the PodGroup without a parent"
    )
    assert spec.min_member == 2
