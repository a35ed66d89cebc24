"""The per-group objects as rendered, and how changes to them become patches."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.membership import SSH_PATH_ANNOTATION, SSH_PORT_ANNOTATION
from extender.injection import names
from extender.injection.objects import (
    ForeignObjectError,
    check_managed,
    contains,
    desired_configmap,
    desired_service,
    owner_reference,
    serves_members,
    ssh_settings,
    update_patch,
)
from extender.injection.patch import apply_patch
from tests.builders import make_pod, make_podgroup

OWNER = {
    "apiVersion": "scheduling.gang-extender.io/v1alpha1",
    "kind": "PodGroup",
    "name": "hvd",
    "uid": "u1",
    "controller": True,
}


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """As the API server returns it: with a resourceVersion (and for Services, defaults)."""
    result = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "7", "uid": "x"}}
    if obj["kind"] == "Service":
        spec = dict(obj["spec"])
        spec["ports"] = [{**port, "targetPort": port["port"]} for port in spec["ports"]]
        spec["clusterIPs"] = ["None"]
        result["spec"] = spec
    return result


def test_owner_reference_to_the_podgroup() -> None:
    podgroup = make_podgroup("hvd", 4)
    podgroup["metadata"]["uid"] = "u1"
    assert owner_reference(podgroup) == OWNER


def test_a_podgroup_without_uid_cannot_own() -> None:
    with pytest.raises(ValueError, match="metadata.uid"):
        owner_reference(make_podgroup("hvd", 4))


class TestUpdatePatch:
    def test_an_unchanged_service_with_server_defaults_needs_no_patch(self) -> None:
        service = desired_service(namespace="ns", group="hvd", ssh_port=22, owner=OWNER)
        assert update_patch(stored(service), service) == []

    def test_a_port_change_patches_the_spec_and_keeps_server_fields(self) -> None:
        old = stored(desired_service(namespace="ns", group="hvd", ssh_port=22, owner=OWNER))
        new = desired_service(namespace="ns", group="hvd", ssh_port=2222, owner=OWNER)
        patched = apply_patch(old, update_patch(old, new))
        assert patched["spec"]["ports"][0]["port"] == 2222
        assert patched["spec"]["clusterIPs"] == ["None"]

    def test_the_patch_is_guarded_by_the_resource_version_read(self) -> None:
        old = stored(desired_configmap(namespace="ns", group="hvd", data={"a": "1"}, owner=OWNER))
        new = desired_configmap(namespace="ns", group="hvd", data={"a": "2"}, owner=OWNER)
        assert update_patch(old, new)[0] == {
            "op": "replace",
            "path": "/metadata/resourceVersion",
            "value": "7",
        }

    def test_data_is_replaced_whole_so_stale_keys_go(self) -> None:
        old = stored(
            desired_configmap(namespace="ns", group="hvd", data={"a": "1", "b": "2"}, owner=OWNER)
        )
        new = desired_configmap(namespace="ns", group="hvd", data={"a": "1"}, owner=OWNER)
        assert apply_patch(old, update_patch(old, new))["data"] == {"a": "1"}

    def test_labels_of_others_stay(self) -> None:
        old = stored(desired_configmap(namespace="ns", group="hvd", data={}, owner=OWNER))
        old["metadata"]["labels"] = {"team": "ml"}
        new = desired_configmap(namespace="ns", group="hvd", data={}, owner=OWNER)
        labels = apply_patch(old, update_patch(old, new))["metadata"]["labels"]
        assert labels["team"] == "ml" and labels["app.kubernetes.io/managed-by"] == "gang-extender"

    def test_owner_references_of_other_objects_stay(self) -> None:
        other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "o"}
        old = stored(desired_configmap(namespace="ns", group="hvd", data={}, owner=OWNER))
        old["metadata"]["ownerReferences"] = [other, {**OWNER, "uid": "stale"}]
        new = desired_configmap(namespace="ns", group="hvd", data={}, owner=OWNER)
        owners = apply_patch(old, update_patch(old, new))["metadata"]["ownerReferences"]
        assert owners == [other, OWNER]


@pytest.mark.parametrize(
    ("have", "want", "expected"),
    [
        pytest.param({"a": 1, "b": 2}, {"a": 1}, True, id="extra key in have"),
        pytest.param({"a": 1}, {"a": 2}, False, id="different value"),
        pytest.param([{"p": 1, "t": 1}], [{"p": 1}], True, id="defaults inside a list item"),
        pytest.param([{"p": 1}, {"p": 2}], [{"p": 1}], False, id="list of another length"),
        pytest.param(None, {"a": 1}, False, id="absent"),
    ],
)
def test_contains(have: Any, want: Any, expected: bool) -> None:
    assert contains(have, want) is expected


def test_a_foreign_object_is_named_with_the_fix() -> None:
    with pytest.raises(ForeignObjectError) as raised:
        check_managed({"kind": "Secret", "metadata": {"namespace": "ns", "name": "hvd-ssh"}})
    assert "Secret ns/hvd-ssh exists but is not managed by gang-extender" in str(raised.value)
    assert "delete or rename it, or rename the group" in str(raised.value)


class TestSshSettings:
    def test_defaults_without_annotations(self) -> None:
        assert ssh_settings([make_pod("a").obj()]) == (22, "/root/.ssh")

    def test_the_first_pod_by_name_that_names_them(self) -> None:
        pods = [
            make_pod("b").annotation(SSH_PORT_ANNOTATION, "2300").obj(),
            make_pod("a").annotation(SSH_PORT_ANNOTATION, "2222").obj(),
            make_pod("c").annotation(SSH_PATH_ANNOTATION, "/home/u/.ssh").obj(),
        ]
        assert ssh_settings(pods) == (2222, "/home/u/.ssh")

    def test_a_malformed_annotation_on_an_old_pod_is_passed_over(self) -> None:
        pods = [
            make_pod("a").annotation(SSH_PORT_ANNOTATION, "ssh").obj(),
            make_pod("b").annotation(SSH_PORT_ANNOTATION, "2222").obj(),
        ]
        assert ssh_settings(pods) == (2222, "/root/.ssh")


def jobset_service(**spec: Any) -> dict[str, Any]:
    """The headless Service JobSet makes, named after the JobSet."""
    return {
        "kind": "Service",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "clusterIP": "None",
            "selector": {"jobset.sigs.k8s.io/jobset-name": "train"},
            **spec,
        },
    }


def labelled(*labels: dict[str, str]) -> list[dict[str, Any]]:
    return [{"metadata": {"labels": each}} for each in labels]


MEMBERS_OF_TRAIN = labelled(
    {"jobset.sigs.k8s.io/jobset-name": "train", "x": "1"},
    {"jobset.sigs.k8s.io/jobset-name": "train"},
)


@pytest.mark.parametrize(
    ("service", "pods", "used"),
    [
        pytest.param(jobset_service(), MEMBERS_OF_TRAIN, True, id="JobSet's, selecting all"),
        pytest.param(
            jobset_service(),
            [*MEMBERS_OF_TRAIN, *labelled({"jobset.sigs.k8s.io/jobset-name": "other"})],
            False,
            id="a member it does not select",
        ),
        pytest.param(
            jobset_service(clusterIP="10.0.0.9"), MEMBERS_OF_TRAIN, False, id="not headless"
        ),
        pytest.param(jobset_service(type="NodePort"), MEMBERS_OF_TRAIN, False, id="a NodePort"),
        pytest.param(jobset_service(selector={}), MEMBERS_OF_TRAIN, False, id="no selector"),
        pytest.param(jobset_service(), [], False, id="no members yet"),
        pytest.param(
            {
                **jobset_service(),
                "metadata": {"labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}},
            },
            MEMBERS_OF_TRAIN,
            False,
            id="labelled ours: the seal decides, not this",
        ),
    ],
)
def test_another_controllers_headless_service_selecting_every_member_is_used(
    service: dict[str, Any], pods: list[dict[str, Any]], used: bool
) -> None:
    assert serves_members(service, pods) is used
