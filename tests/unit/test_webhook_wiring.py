"""The wiring controller: a group's Secret, headless Service and ConfigMap (DESIGN section 4).

The controller runs against `FakeApiServer`, an in-memory stand-in for the few
core/v1 endpoints it uses, in place of the project's `RawApi` (it answers `call`
with JSON dicts or raises KubeError), so the real paths, query parameters, content
types and patch bodies the controller sends are what it sees.
"""

from __future__ import annotations

import base64
import copy
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from extender.domain.objects.membership import (
    SSH_PORT_ANNOTATION,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
)
from extender.injection.patch import apply_patch
from extender.kube.rawapi import KubeError, RawApi
from extender.kube.wiring import WiringConflictError, WiringController
from tests.builders import make_pod, make_podgroup

NS = "team"


class FakeApiServer(RawApi):
    """core/v1 objects (and mutatingwebhookconfigurations), in memory, behind RawApi.call.

    GET (one object, or a namespace's list), POST, and PATCH with a JSON patch (a resourceVersion in the patched object
    that is not the stored one answers 409, as the API server does). Services get
    the API server's defaults (clusterIPs, targetPort...) so the controller must not
    mistake them for drift. `writes` counts POST and PATCH calls; `requests` holds
    every (method, path), and `sent` every (method, path, query, content type).
    Failures are KubeError, as RawApi raises them: status, Status reason and message.
    """

    def __init__(self) -> None:  # no super(): there is no connection to configure
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.requests: list[tuple[str, str]] = []
        self.sent: list[tuple[str, str, dict[str, Any], str]] = []
        self._versions = itertools.count(1)
        # Run just before a request is served: lets a test race the controller.
        self.before: Callable[[str, str], None] | None = None
        self.fail_with: int | None = None

    def put(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[(kind, meta.get("namespace", ""), meta["name"])] = stored

    def get(self, kind: str, name: str, namespace: str = NS) -> dict[str, Any]:
        return self.objects[(kind, namespace, name)]

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        self.requests.append((method, path))
        self.sent.append((method, path, dict(query or {}), content_type))
        if self.before is not None:
            self.before(method, path)
        if self.fail_with is not None:
            raise KubeError(self.fail_with, "injected failure")
        kind, namespace, name = _parse(path)
        key = (kind, namespace, name or "")
        if method == "GET" and name is None:
            items = [
                obj for (k, ns, _), obj in self.objects.items() if (k, ns) == (kind, namespace)
            ]
            return copy.deepcopy({"kind": "List", "items": items})
        if method == "GET":
            if key not in self.objects:
                raise KubeError(404, "not found", "NotFound", phrase="Not Found")
            return copy.deepcopy(self.objects[key])
        if method == "POST":
            self.writes.append((method, kind))
            assert content_type == "application/json"
            key = (kind, namespace, body["metadata"]["name"])
            if key in self.objects:
                raise KubeError(409, "already exists", "AlreadyExists", phrase="Conflict")
            created = copy.deepcopy(body)
            created["metadata"]["uid"] = f"uid-{body['metadata']['name']}"
            if kind == "services":
                _default_service(created)
            self.put(kind, created)
            return copy.deepcopy(self.objects[key])
        if method == "PATCH":
            self.writes.append((method, kind))
            assert content_type == "application/json-patch+json"
            if key not in self.objects:
                raise KubeError(404, "not found", "NotFound", phrase="Not Found")
            current = self.objects[key]
            patched = apply_patch(current, body)
            if patched["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise KubeError(409, "the object has been modified", "Conflict", phrase="Conflict")
            self.put(kind, patched)
            return copy.deepcopy(self.objects[key])
        raise AssertionError(f"unexpected {method} {path}")


def _parse(path: str) -> tuple[str, str, str | None]:
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"] and parts[2] == "namespaces":
        return parts[4], parts[3], parts[5] if len(parts) > 5 else None
    if parts[0] == "apis" and parts[1] == "admissionregistration.k8s.io":
        return parts[3], "", parts[4] if len(parts) > 4 else None
    raise AssertionError(f"unexpected path {path}")


def _default_service(service: dict[str, Any]) -> None:
    spec = service["spec"]
    spec.setdefault("clusterIPs", ["None"])
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        port.setdefault("targetPort", port["port"])
    service["status"] = {"loadBalancer": {}}


def podgroup(name: str = "hvd", uid: str = "pg-uid-1", **spec: Any) -> dict[str, Any]:
    group = make_podgroup(name, 4, namespace=NS, **spec)
    group["metadata"]["uid"] = uid
    return group


def member(name: str, task: str, index: int, group: str = "hvd") -> dict[str, Any]:
    return (
        make_pod(name, NS)
        .group(group)
        .task(task)
        .annotation(TASK_INDEX_ANNOTATION, str(index))
        .annotation(TASKS_ANNOTATION, "master=1,worker=3")
        .obj()
    )


HOROVOD = [member("m", "master", 0)] + [member(f"w{i}", "worker", i) for i in range(3)]


def secret_data(server: FakeApiServer, name: str = "hvd-ssh") -> dict[str, str]:
    data = server.get("secrets", name)["data"]
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def controller(server: FakeApiServer) -> WiringController:
    return WiringController(server)


def test_nothing_happens_before_the_podgroup_exists(
    server: FakeApiServer, controller: WiringController
) -> None:
    controller.reconcile(namespace=NS, group="hvd", podgroup=None, pods=HOROVOD)
    assert server.requests == []


def test_the_requests_are_core_v1_with_our_field_manager(
    server: FakeApiServer, controller: WiringController
) -> None:
    controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
    controller.reconcile(
        namespace=NS, group="hvd", pods=HOROVOD, podgroup=podgroup(minTaskMember={"worker": 5})
    )
    ours = {"fieldManager": "gang-extender"}
    base = "/api/v1/namespaces/team"
    json, json_patch = "application/json", "application/json-patch+json"
    # Each object is sealed right after its create (kube/ownership.py).
    assert server.sent == [
        ("GET", f"{base}/services/hvd", {}, json),
        ("POST", f"{base}/services", ours, json),
        ("PATCH", f"{base}/services/hvd", ours, json_patch),
        ("GET", f"{base}/secrets/hvd-ssh", {}, json),
        ("POST", f"{base}/secrets", ours, json),
        ("PATCH", f"{base}/secrets/hvd-ssh", ours, json_patch),
        ("GET", f"{base}/configmaps/hvd-svc", {}, json),
        ("POST", f"{base}/configmaps", ours, json),
        ("PATCH", f"{base}/configmaps/hvd-svc", ours, json_patch),
        ("GET", f"{base}/services/hvd", {}, json),
        # The Secret does not follow the layout (members mount it as a snapshot).
        ("GET", f"{base}/secrets/hvd-ssh", {}, json),
        ("GET", f"{base}/configmaps/hvd-svc", {}, json),
        ("PATCH", f"{base}/configmaps/hvd-svc", ours, json_patch),
    ]


class TestHorovodGroup:
    def test_headless_service_selects_the_group_and_publishes_unready_members(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        service = server.get("services", "hvd")
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == {"gang-extender.io/group": "hvd"}
        assert service["spec"]["publishNotReadyAddresses"] is True
        assert service["spec"]["ports"][0]["port"] == 22

    def test_every_object_is_owned_by_the_podgroup(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        for kind, name in [("services", "hvd"), ("configmaps", "hvd-svc"), ("secrets", "hvd-ssh")]:
            meta = server.get(kind, name)["metadata"]
            assert meta["ownerReferences"] == [
                {
                    "apiVersion": "scheduling.gang-extender.io/v1alpha1",
                    "kind": "PodGroup",
                    "name": "hvd",
                    "uid": "pg-uid-1",
                    "controller": True,
                }
            ]
            assert meta["labels"]["app.kubernetes.io/managed-by"] == "gang-extender"

    def test_configmap_holds_the_host_lists_and_hostfile(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        data = server.get("configmaps", "hvd-svc")["data"]
        assert data["worker.host"] == "hvd-worker-0.hvd\nhvd-worker-1.hvd\nhvd-worker-2.hvd"
        assert data["master.host"] == "hvd-master-0.hvd"
        assert data["hostfile"].count("slots=1") == 4
        assert data["VC_WORKER_NUM"] == "3"
        assert data["GANG_NUM_SLOTS"] == "4"

    def test_secret_holds_a_matching_key_pair_and_a_config_matching_every_member(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        data = secret_data(server)
        key = serialization.load_ssh_private_key(data["id_rsa"].encode(), password=None)
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        assert data["id_rsa.pub"].split()[:2] == public.decode().split()
        assert data["authorized_keys"] == data["id_rsa.pub"]
        assert "Host hvd-*.hvd hvd-*.hvd.*\n  Port 22\n" in data["config"]
        assert "Host hvd-* !*.*\n  HostName %h.hvd\n  Port 22\n" in data["config"]
        assert server.get("secrets", "hvd-ssh")["type"] == "Opaque"

    def test_reconciling_an_unchanged_group_writes_nothing(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert len(server.writes) == 6, "three creates, each sealed"
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert len(server.writes) == 6


class TestLayoutChanges:
    def test_a_new_member_updates_the_configmap_and_leaves_the_secret_alone(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        two = [
            make_pod(f"w{i}", NS).group("dep").annotation(TASK_INDEX_ANNOTATION, str(i)).obj()
            for i in range(2)
        ]
        group = podgroup("dep")
        controller.reconcile(namespace=NS, group="dep", podgroup=group, pods=two)
        before = server.get("secrets", "dep-ssh")
        third = make_pod("w2", NS).group("dep").annotation(TASK_INDEX_ANNOTATION, "2").obj()
        controller.reconcile(namespace=NS, group="dep", podgroup=group, pods=[*two, third])
        assert server.get("configmaps", "dep-svc")["data"]["VC_WORKER_NUM"] == "3"
        # Members mount the Secret as a snapshot (subPath): it must not change with them.
        assert server.get("secrets", "dep-ssh") == before
        # Created, then sealed (kube/ownership.py); never written again for a member.
        assert [write for write in server.writes if write[1] == "secrets"] == [
            ("POST", "secrets"),
            ("PATCH", "secrets"),
        ]

    def test_a_removed_task_disappears_from_the_configmap(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(
            namespace=NS,
            group="hvd",
            pods=[],
            podgroup=podgroup(minTaskMember={"master": 1, "worker": 1}),
        )
        controller.reconcile(
            namespace=NS, group="hvd", pods=[], podgroup=podgroup(minTaskMember={"worker": 1})
        )
        assert "master.host" not in server.get("configmaps", "hvd-svc")["data"]

    def test_the_ssh_port_annotation_reaches_the_service_and_the_config(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        pods = [make_pod("w0", NS).group("g").annotation(SSH_PORT_ANNOTATION, "2222").obj()]
        controller.reconcile(namespace=NS, group="g", podgroup=podgroup("g"), pods=pods)
        assert server.get("services", "g")["spec"]["ports"][0]["port"] == 2222
        assert "  Port 2222\n" in secret_data(server, "g-ssh")["config"]

    def test_a_recreated_podgroup_takes_over_ownership(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        controller.reconcile(
            namespace=NS, group="hvd", podgroup=podgroup(uid="pg-uid-2"), pods=HOROVOD
        )
        owners = server.get("configmaps", "hvd-svc")["metadata"]["ownerReferences"]
        assert [owner["uid"] for owner in owners] == ["pg-uid-2"]


def test_two_groups_get_different_keys(server: FakeApiServer, controller: WiringController) -> None:
    for name in ("a", "b"):
        pods = [make_pod(f"{name}0", NS).group(name).obj()]
        controller.reconcile(namespace=NS, group=name, podgroup=podgroup(name), pods=pods)
    assert secret_data(server, "a-ssh")["id_rsa"] != secret_data(server, "b-ssh")["id_rsa"]


class TestTrouble:
    def test_a_foreign_object_with_our_name_is_reported_not_overwritten(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        server.put("configmaps", {"metadata": {"name": "hvd-svc", "namespace": NS}, "data": {}})
        with pytest.raises(WiringConflictError, match="not managed by gang-extender"):
            controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert server.get("configmaps", "hvd-svc")["data"] == {}

    def test_a_damaged_secret_is_reported_and_never_replaced_silently(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        server.get("secrets", "hvd-ssh")["data"]["id_rsa"] = base64.b64encode(b"junk").decode()
        with pytest.raises(WiringConflictError, match="delete it and gang-extender creates"):
            controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)

    def test_a_secret_created_concurrently_keeps_the_other_writers_keys(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        other = WiringController(server)
        other.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        theirs = server.objects.pop(("secrets", NS, "hvd-ssh"))

        def put_back_before_post(method: str, path: str) -> None:
            if method == "POST" and path.endswith("/secrets"):
                server.objects[("secrets", NS, "hvd-ssh")] = theirs

        server.before = put_back_before_post
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert server.get("secrets", "hvd-ssh")["data"]["id_rsa"] == theirs["data"]["id_rsa"]

    def test_a_concurrent_change_fails_the_update_with_409_for_the_caller_to_retry(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)

        def bump_before_patch(method: str, path: str) -> None:
            if method == "PATCH":
                server.put("configmaps", server.get("configmaps", "hvd-svc"))

        server.before = bump_before_patch
        with pytest.raises(KubeError) as raised:
            controller.reconcile(
                namespace=NS,
                group="hvd",
                pods=HOROVOD,
                podgroup=podgroup(minTaskMember={"worker": 5}),
            )
        assert raised.value.status == 409

    def test_api_errors_are_raised(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        server.fail_with = 500
        with pytest.raises(KubeError) as raised:
            controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert raised.value.status == 500


def ready(pod: dict[str, Any], node: str = "n1", *, is_ready: bool = True) -> dict[str, Any]:
    """`pod` placed on `node`, with its Ready condition as the kubelet reports it."""
    placed = copy.deepcopy(pod)
    placed["spec"]["nodeName"] = node
    placed["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if is_ready else "False"}],
    }
    return placed


class TestReadyHosts:
    def test_the_configmap_lists_the_ready_members_and_carries_the_scripts(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        pods = [ready(HOROVOD[0]), ready(HOROVOD[1]), HOROVOD[2], ready(HOROVOD[3], is_ready=False)]
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
        data = server.get("configmaps", "hvd-svc")["data"]
        assert data["ready.hostfile"] == "hvd-master-0.hvd slots=1\nhvd-worker-0.hvd slots=1\n"
        assert data["discover_hosts.sh"].startswith("#!/bin/sh\n")
        assert (
            "group='hvd'" in data["wait_for_tasks.sh"] or "group=hvd" in data["wait_for_tasks.sh"]
        )

    def test_one_configmap_write_per_readiness_change_and_none_otherwise(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        pods = [ready(pod, is_ready=False) for pod in HOROVOD]
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
        created = list(server.writes)
        # Another status update that leaves every member not Ready: nothing to write.
        pods[1]["status"]["podIP"] = "10.0.0.7"
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
        assert server.writes == created
        # A worker turns Ready: the ConfigMap, and only it, is written once.
        pods[1] = ready(HOROVOD[1])
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
        assert server.writes[len(created) :] == [("PATCH", "configmaps")]
        assert server.get("configmaps", "hvd-svc")["data"]["ready.hostfile"] == (
            "hvd-worker-0.hvd slots=1\n"
        )

    def test_a_member_that_goes_away_leaves_the_list(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        pods = [ready(pod) for pod in HOROVOD]
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
        assert server.get("configmaps", "hvd-svc")["data"]["ready.hostfile"].count("\n") == 4
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods[:3])
        assert (
            "hvd-worker-2.hvd" not in server.get("configmaps", "hvd-svc")["data"]["ready.hostfile"]
        )


def test_clearing_the_ready_list_touches_only_it_and_only_once(
    server: FakeApiServer, controller: WiringController
) -> None:
    pods = [ready(pod) for pod in HOROVOD]
    controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=pods)
    before = copy.deepcopy(server.get("configmaps", "hvd-svc")["data"])
    written = len(server.writes)
    controller.clear_ready_hosts(namespace=NS, group="hvd")
    controller.clear_ready_hosts(namespace=NS, group="hvd")
    assert server.writes[written:] == [("PATCH", "configmaps")]
    after = server.get("configmaps", "hvd-svc")["data"]
    assert after == {**before, "ready.hostfile": ""}


def test_clearing_the_ready_list_of_a_group_never_wired_writes_nothing(
    server: FakeApiServer, controller: WiringController
) -> None:
    controller.clear_ready_hosts(namespace=NS, group="hvd")
    assert server.writes == []


# ------------------- issue 30, finding 6: the label says nothing, only the seal does
def planted_copies(kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The group's objects as a tenant would plant them before the group exists: made by
    someone else (a scratch API server here), labelled managed-by gang-extender, with a
    key pair the tenant knows, under uids of their own and no seal of ours."""
    scratch = FakeApiServer()
    WiringController(scratch).reconcile(
        namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD
    )
    planted = {}
    for kind, name in {
        "services": "hvd",
        "secrets": "hvd-ssh",
        "configmaps": "hvd-svc",
    }.items():
        if kind not in kinds:
            continue
        obj = copy.deepcopy(scratch.get(kind, name))
        obj["metadata"].pop("annotations", None)
        obj["metadata"]["uid"] = f"planted-{kind}"
        obj["metadata"]["ownerReferences"] = []
        planted[kind] = obj
    return planted


def plant(server: FakeApiServer, *kinds: str) -> dict[str, dict[str, Any]]:
    planted = planted_copies(kinds)
    for kind, obj in planted.items():
        server.put(kind, obj)
    return planted


class TestPlantedObjects:
    def test_a_planted_secrets_key_pair_is_never_used(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        planted = plant(server, "secrets")["secrets"]
        notices = controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        secret = server.get("secrets", "hvd-ssh")
        assert secret["data"]["id_rsa"] != planted["data"]["id_rsa"], "a new key pair"
        assert secret["data"]["authorized_keys"] != planted["data"]["authorized_keys"]
        assert notices is not None and len(notices) == 1
        assert "Secret team/hvd-ssh" in notices[0] and "key pair was replaced" in notices[0]
        # Sealed now: the next reconcile keeps these keys, writes nothing, says nothing.
        writes = len(server.writes)
        again = controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert again == [] and len(server.writes) == writes
        assert server.get("secrets", "hvd-ssh")["data"]["id_rsa"] == secret["data"]["id_rsa"]

    def test_a_seal_copied_from_our_secret_onto_a_planted_one_is_not_trusted(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        ours = server.get("secrets", "hvd-ssh")
        other = FakeApiServer()
        planted = plant(other, "secrets")["secrets"]
        planted["metadata"]["annotations"] = dict(ours["metadata"]["annotations"])
        other.put("secrets", planted)
        WiringController(other).reconcile(
            namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD
        )
        assert other.get("secrets", "hvd-ssh")["data"]["id_rsa"] != planted["data"]["id_rsa"]

    def test_a_planted_service_that_is_not_headless_is_refused(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        service = plant(server, "services")["services"]
        service["spec"].update(clusterIP="10.0.0.5", clusterIPs=["10.0.0.5"])
        server.put("services", service)
        with pytest.raises(WiringConflictError, match="not a headless Service; delete it"):
            controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert server.get("services", "hvd")["spec"]["clusterIP"] == "10.0.0.5"

    def test_a_planted_headless_service_and_configmap_are_adopted_with_a_notice(
        self, server: FakeApiServer, controller: WiringController
    ) -> None:
        planted = plant(server, "services", "configmaps")
        planted["configmaps"]["data"]["hostfile"] = "attacker.example slots=8\n"
        server.put("configmaps", planted["configmaps"])
        notices = controller.reconcile(namespace=NS, group="hvd", podgroup=podgroup(), pods=HOROVOD)
        assert notices is not None
        assert [n.split(" carries")[0] for n in notices] == [
            "Service team/hvd",
            "ConfigMap team/hvd-svc",
        ]
        assert "attacker.example" not in server.get("configmaps", "hvd-svc")["data"]["hostfile"]
        owners = server.get("configmaps", "hvd-svc")["metadata"]["ownerReferences"]
        assert [o["uid"] for o in owners] == ["pg-uid-1"]
