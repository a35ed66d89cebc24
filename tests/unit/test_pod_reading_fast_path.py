"""Reading a pod from the watch gives the same answers with its memos as without.

Three shortcuts of `PodInfo.from_api` (the start-up lists read every pod once):
a container's requests are kept per distinct (limits, requests) items, one
Toleration is shared per distinct toleration, and `group_name` skips the readers
of `spec.schedulingGroup` and `spec.workloadRef` when the spec has neither. The
references below are the code they replaced, run on the same inputs, repeated
(the second reading is the memo's), with JSON's awkward values mixed in: numbers,
booleans (1 and True hash alike), null, lists and objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.objects import membership
from extender.domain.objects.membership import MembershipError, group_name
from extender.domain.objects.model import PodInfo, Toleration
from extender.domain.objects.quantity import (
    QuantityError,
    _add_max,
    _add_sum,
    _container_requests,
    pod_requests,
    resource_list,
)

# ---- the plain paths, as they were ----


def plain_container_requests(container: Any) -> dict[str, int]:
    if not isinstance(container, Mapping):
        raise QuantityError(f"expected a container object, not {type(container).__name__}")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise QuantityError(f"expected resources to be an object, not {type(resources).__name__}")
    merged = resource_list(resources.get("limits"))
    merged.update(resource_list(resources.get("requests")))
    return merged


def plain_pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add_sum(total, plain_container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for init in spec.get("initContainers") or []:
        requests = plain_container_requests(init)
        if init.get("restartPolicy") == "Always":
            _add_sum(total, requests)
            _add_sum(sidecars, requests)
            _add_max(init_peak, sidecars)
        else:
            running = dict(requests)
            _add_sum(running, sidecars)
            _add_max(init_peak, running)
    _add_max(total, init_peak)
    _add_sum(total, resource_list(spec.get("overhead")))
    total["pods"] = 1
    return total


def plain_group_name(meta: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> str | None:
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    values = (
        labels.get(membership.GROUP_LABEL),
        labels.get(membership.COSCHEDULING_GROUP_LABEL),
        annotations.get(membership.VOLCANO_GROUP_ANNOTATION),
        annotations.get(membership.VOLCANO_OWN_GROUP_ANNOTATION),
        membership.upstream_group_name(spec),
        ref.group if (ref := membership.workload_ref(spec)) else None,
    )
    distinct = {value for value in values if value}
    if len(distinct) > 1:
        raise MembershipError("two groups")
    return distinct.pop() if distinct else None


def outcome(read: Any, *args: Any) -> tuple[str, Any]:
    """What a reader gave: its value, or the error it raised (type and message)."""
    try:
        return ("value", read(*args))
    except (QuantityError, MembershipError) as err:
        return (type(err).__name__, str(err) if isinstance(err, QuantityError) else "")


# ---- inputs: what the API server sends, and what a forged request body could ----

QUANTITIES = st.one_of(
    st.sampled_from(["1", "500m", "2Gi", "0", "1e3", "8", "1.5", "1Q", "", "-1", "NaN"]),
    st.sampled_from([1, 1.0, True, False, 0, None, [1], {"a": 1}, 2**64]),
)
RESOURCE_NAMES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "example.com/x"])
RESOURCE_MAPS = st.one_of(
    st.dictionaries(RESOURCE_NAMES, QUANTITIES, max_size=3),
    st.sampled_from([None, [], "", 0, ["cpu"], "1"]),
)
RESOURCES = st.one_of(
    st.fixed_dictionaries({}, optional={"limits": RESOURCE_MAPS, "requests": RESOURCE_MAPS}),
    st.sampled_from([None, [], "x"]),
)
CONTAINERS = st.one_of(
    st.fixed_dictionaries(
        {"resources": RESOURCES},
        optional={"restartPolicy": st.sampled_from(["Always", "OnFailure", None])},
    ),
    st.sampled_from([None, "c", []]),
)
SPECS = st.fixed_dictionaries(
    {"containers": st.lists(CONTAINERS, max_size=3)},
    optional={
        "initContainers": st.lists(CONTAINERS, max_size=3),
        "overhead": RESOURCE_MAPS,
    },
)


@given(st.lists(SPECS, min_size=1, max_size=4))
@settings(max_examples=400, deadline=None)
def test_a_pods_requests_read_through_the_memo_equal_the_plain_reading(specs) -> None:
    # Each spec twice, interleaved with the others: the memo's hits, and its misses.
    for spec in specs + specs:
        assert outcome(pod_requests, spec) == outcome(plain_pod_requests, spec), spec


def test_a_kept_containers_requests_are_read_only() -> None:
    # Every container with these resources gets this same mapping back.
    container = {"resources": {"requests": {"cpu": "1"}}}
    kept = _container_requests(container)
    with pytest.raises(TypeError):
        kept["cpu"] = 999  # type: ignore[index]
    assert _container_requests(container) == {"cpu": 1000}
    assert pod_requests({"containers": [container, container]}) == {"cpu": 2000, "pods": 1}


GROUP_VALUES = st.sampled_from(["a", "b", "", None])
REFS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"podGroupName": st.sampled_from(["a", "b", "", None, 3])}),
    st.sampled_from(["x", [], 0]),
)
WORKLOAD_REFS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"name": st.sampled_from(["w", "", None]), "podGroup": st.sampled_from(["a", "", None])},
        optional={"podGroupReplicaKey": st.sampled_from(["", "r", 1])},
    ),
    st.sampled_from(["x", 0]),
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "labels": st.fixed_dictionaries(
                {},
                optional={
                    membership.GROUP_LABEL: GROUP_VALUES,
                    membership.COSCHEDULING_GROUP_LABEL: GROUP_VALUES,
                },
            ),
            "annotations": st.fixed_dictionaries(
                {},
                optional={
                    membership.VOLCANO_GROUP_ANNOTATION: GROUP_VALUES,
                    membership.VOLCANO_OWN_GROUP_ANNOTATION: GROUP_VALUES,
                },
            ),
        },
    ),
    st.one_of(
        st.none(),
        st.fixed_dictionaries({}, optional={"schedulingGroup": REFS, "workloadRef": WORKLOAD_REFS}),
    ),
)
@settings(max_examples=500, deadline=None)
def test_the_group_a_pod_names_is_the_plain_readings(meta, spec) -> None:
    assert outcome(group_name, meta, spec) == outcome(plain_group_name, meta, spec)


TOLERATION_VALUES = st.sampled_from(["", "v", None, 1, True, 1.0, 0, False])


@given(
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "key": TOLERATION_VALUES,
                "operator": st.sampled_from(["Exists", "Equal", "", None]),
                "value": st.one_of(TOLERATION_VALUES, st.sampled_from([["v"], {"a": 1}])),
                "effect": st.sampled_from(["NoSchedule", "NoExecute", "", None, True, 1]),
            },
        ),
        max_size=4,
    )
)
@settings(max_examples=300, deadline=None)
def test_a_pods_tolerations_are_the_ones_it_lists_value_for_value(tolerations) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"tolerations": tolerations},
    }
    for _ in range(2):
        got = PodInfo.from_api(pod).tolerations
        want = tuple(
            Toleration(
                t.get("key") or None,
                t.get("operator") or "Equal",
                t.get("value"),
                t.get("effect") or None,
            )
            for t in tolerations
        )
        assert got == want
        # 1 and True compare equal: the types must match too, one by one.
        assert [tuple(map(type, vars(t).values())) for t in got] == [
            tuple(map(type, vars(t).values())) for t in want
        ]


@pytest.mark.parametrize("value", [1, True, 1.0])
def test_one_true_and_one_point_zero_stay_what_the_pod_said(value: object) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"tolerations": [{"key": "k", "value": value}]},
    }
    for other in (1, True, 1.0):  # the memo has seen every one of them
        PodInfo.from_api({**pod, "spec": {"tolerations": [{"key": "k", "value": other}]}})
    (toleration,) = PodInfo.from_api(pod).tolerations
    assert type(toleration.value) is type(value)


@pytest.mark.parametrize(
    ("first", "then"),
    [(1, True), (True, 1), (1, 1.0), (1.0, True), ("1", 1)],
)
def test_one_true_and_one_point_zero_in_a_request_are_read_each_as_itself(
    first: object, then: object
) -> None:
    # The second is read after the first, whatever the first left in the memo.
    for value in (first, then):
        spec = {"containers": [{"resources": {"requests": {"cpu": value}}}]}
        assert outcome(pod_requests, spec) == outcome(plain_pod_requests, spec), value


def test_a_pod_claiming_two_groups_has_no_minimum_of_its_own() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "labels": {membership.GROUP_LABEL: "a", membership.COSCHEDULING_GROUP_LABEL: "b"},
            "annotations": {membership.MIN_AVAILABLE_ANNOTATION: "2"},
        },
        "spec": {},
    }
    info = PodInfo.from_api(pod)
    assert info.group is None and info.group_error is not None
    assert info.min_available is None
