"""How a pod names its group, size, task and index; resource quantities (table tests)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from extender.domain.objects import membership as m
from extender.domain.objects.quantity import (
    QuantityError,
    parse_quantity,
    pod_gpus,
    pod_requests,
)


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        pytest.param({m.GROUP_LABEL: "job"}, {}, "job", id="gang-extender label"),
        pytest.param({m.COSCHEDULING_GROUP_LABEL: "job"}, {}, "job", id="scheduler-plugins label"),
        pytest.param({}, {m.VOLCANO_GROUP_ANNOTATION: "job"}, "job", id="Volcano annotation"),
        pytest.param(
            {m.VOLCANO_GROUP_ANNOTATION: "job"}, {}, "job", id="Volcano's key as a label (Trainer)"
        ),
        pytest.param(
            {m.GROUP_LABEL: "job", m.COSCHEDULING_GROUP_LABEL: "job"},
            {},
            "job",
            id="two sources agreeing",
        ),
        pytest.param({}, {}, None, id="no group"),
    ],
)
def test_group_sources(
    labels: dict[str, str], annotations: dict[str, str], expected: str | None
) -> None:
    assert m.group_name({"labels": labels, "annotations": annotations}) == expected


def test_two_sources_naming_different_groups_is_an_error_naming_both() -> None:
    with pytest.raises(m.MembershipError, match="two groups") as err:
        m.group_name(
            {"labels": {m.GROUP_LABEL: "a"}, "annotations": {m.VOLCANO_GROUP_ANNOTATION: "b"}}
        )
    assert "'a'" in str(err.value) and "'b'" in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("master=1,worker=3", {"master": 1, "worker": 3}),
        (" ps = 2 , worker=4 ", {"ps": 2, "worker": 4}),
    ],
)
def test_task_layout(text: str, expected: dict[str, int]) -> None:
    assert m.parse_task_layout(text) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("master", "expected 'task=count"),
        ("Master=1", "lower-case"),
        ("worker=x", "not a whole number"),
        ("worker=0", ">= 1"),
        ("worker=1,worker=2", "twice"),
        ("", "names no task"),
    ],
)
def test_bad_task_layout_says_what_to_fix(text: str, needle: str) -> None:
    with pytest.raises(m.MembershipError, match=needle):
        m.parse_task_layout(text)


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        pytest.param({}, {m.TASK_INDEX_ANNOTATION: "2"}, 2, id="explicit annotation"),
        pytest.param({}, {m.JOB_COMPLETION_INDEX_ANNOTATION: "3"}, 3, id="Indexed Job"),
        pytest.param({m.STATEFULSET_POD_INDEX_LABEL: "1"}, {}, 1, id="StatefulSet"),
        pytest.param({}, {m.VOLCANO_TASK_INDEX_ANNOTATION: "5"}, 5, id="Volcano job"),
        pytest.param(
            {},
            {m.TASK_INDEX_ANNOTATION: "1", m.VOLCANO_TASK_INDEX_ANNOTATION: "5"},
            1,
            id="ours before Volcano's",
        ),
        pytest.param(
            {m.STATEFULSET_POD_INDEX_LABEL: "2"},
            {m.VOLCANO_TASK_INDEX_ANNOTATION: "5"},
            5,
            id="Volcano's before the StatefulSet's",
        ),
        pytest.param({}, {}, None, id="none: the webhook allocates"),
    ],
)
def test_task_index_sources(
    labels: dict[str, str], annotations: dict[str, str], expected: int | None
) -> None:
    assert m.explicit_task_index({"labels": labels, "annotations": annotations}) == expected


def test_min_available_must_be_a_positive_whole_number() -> None:
    assert m.min_available({"annotations": {m.MIN_AVAILABLE_ANNOTATION: "4"}}) == 4
    for bad in ("four", "0", "-1"):
        with pytest.raises(m.MembershipError):
            m.min_available({"annotations": {m.MIN_AVAILABLE_ANNOTATION: bad}})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("2Gi", Decimal(2 * 1024**3)),
        ("1.5", Decimal("1.5")),
        ("1e3", Decimal(1000)),
        ("128974848", Decimal(128974848)),
        ("129M", Decimal(129_000_000)),
        ("1E", Decimal(10**18)),
    ],
)
def test_parse_quantity(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "1Q", "abc", "1.2.3"])
def test_parse_quantity_rejects_garbage(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_pod_requests_follow_kube_scheduler_rules() -> None:
    spec = {
        "containers": [
            {
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {"nvidia.com/gpu": "2"},
                }
            },
            {"resources": {"requests": {"cpu": "500m"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "4"}}},  # runs alone before: max, not sum
            {
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "100m"}},
            },  # sidecar: adds
        ],
        "overhead": {"cpu": "50m"},
    }
    assert pod_requests(spec) == {"cpu": 4050, "memory": 1024**3, "nvidia.com/gpu": 2, "pods": 1}


def _container(requests: dict[str, str], **extra: str) -> dict[str, object]:
    return {"name": "c", "resources": {"requests": requests}, **extra}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {
                "containers": [_container({"cpu": "1"})],
                "initContainers": [_container({"cpu": "500m"}, restartPolicy="Always")],
            },
            {"cpu": 1500, "pods": 1},
            id="a sidecar runs beside the containers: it adds",
        ),
        pytest.param(
            {
                "containers": [_container({"cpu": "1"})],
                "initContainers": [_container({"cpu": "500m"}, restartPolicy="OnFailure")],
            },
            {"cpu": 1000, "pods": 1},
            id="an init container with another restartPolicy runs before: it does not add",
        ),
        pytest.param(
            {
                "containers": [_container({"cpu": "500m"})],
                "initContainers": [
                    _container({"cpu": "1"}, restartPolicy="Always"),
                    _container({"cpu": "2"}),
                ],
            },
            {"cpu": 3000, "pods": 1},
            id="an init container after a sidecar runs beside it: its peak includes the sidecar",
        ),
        pytest.param(
            {
                "containers": [_container({"cpu": "1"})],
                "initContainers": [_container({"nvidia.com/gpu": "0"})],
            },
            {"cpu": 1000, "nvidia.com/gpu": 0, "pods": 1},
            id="an init container asking for 0 of something needs 0 of it",
        ),
    ],
)
def test_init_containers_and_sidecars_count_as_kube_scheduler_counts_them(
    spec: dict[str, object], expected: dict[str, int]
) -> None:
    assert pod_requests(spec) == expected


@pytest.mark.parametrize(
    ("spec", "gpus"),
    [
        pytest.param({"containers": [_container({"cpu": "1"})]}, 0, id="no GPU asked for"),
        pytest.param(
            {
                "containers": [_container({})],
                "initContainers": [_container({"nvidia.com/gpu": "0"})],
            },
            0,
            id="0 GPUs asked for by an init container",
        ),
        pytest.param(
            {"containers": [_container({"nvidia.com/gpu": "2"})]}, 2, id="2 GPUs asked for"
        ),
    ],
)
def test_pod_gpus(spec: dict[str, object], gpus: int) -> None:
    assert pod_gpus(spec) == gpus
