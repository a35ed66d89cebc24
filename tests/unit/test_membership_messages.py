"""What a user is told when a pod's group, size, task or index is declared wrong,
word for word, and the edge cases of each source (pure: metadata dicts only).

These messages reach the user as admission denials and PodGroup conditions, so
their exact words are the contract.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects import membership as m


def test_a_group_key_reads_namespace_slash_name_and_sorts_by_namespace_first() -> None:
    assert str(m.GroupKey("team-a", "train")) == "team-a/train"
    assert sorted([m.GroupKey("b", "a"), m.GroupKey("a", "z")]) == [
        m.GroupKey("a", "z"),
        m.GroupKey("b", "a"),
    ]


def test_two_group_sources_that_disagree_are_named_in_the_message() -> None:
    with pytest.raises(m.MembershipError) as err:
        m.group_name(
            {"labels": {m.GROUP_LABEL: "a"}},
            {"schedulingGroup": {"podGroupName": "b"}},
        )
    assert str(err.value) == (
        "pod claims two groups (label gang-extender.io/group='a', "
        "field spec.schedulingGroup.podGroupName='b'); set one group name in all of them"
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"schedulingGroup": {"podGroupName": "job"}}, "job", id="named"),
        pytest.param({"schedulingGroup": {"podGroupName": ""}}, None, id="empty name"),
        pytest.param({"schedulingGroup": {"podGroupName": 3}}, None, id="not a string"),
        pytest.param({"schedulingGroup": "job"}, None, id="not an object"),
        pytest.param({}, None, id="unset"),
        pytest.param(None, None, id="no spec"),
    ],
)
def test_kubernetes_own_group_reference(spec: dict[str, Any] | None, expected: str | None) -> None:
    assert m.upstream_group_name(spec) == expected


def test_a_group_in_the_pod_spec_alone_makes_a_member_in_its_namespace() -> None:
    spec = {"schedulingGroup": {"podGroupName": "job"}}
    assert m.group_key({"namespace": "ml"}, spec) == m.GroupKey("ml", "job")
    assert m.group_key({}, spec) == m.GroupKey("default", "job")
    assert m.group_key({"namespace": "ml"}) is None


def test_an_empty_group_label_is_no_group() -> None:
    assert m.group_name({"labels": {m.GROUP_LABEL: ""}}) is None


@pytest.mark.parametrize(
    ("labels", "annotations", "task"),
    [
        pytest.param({m.TASK_LABEL: "ps"}, {m.VOLCANO_TASK_ANNOTATION: "w"}, "ps", id="label wins"),
        pytest.param({}, {m.VOLCANO_TASK_ANNOTATION: "master"}, "master", id="Volcano's task"),
        pytest.param({}, {}, "worker", id="default"),
        pytest.param(
            {m.JOBSET_REPLICATED_JOB_LABEL: "node", m.JOBSET_JOB_INDEX_LABEL: "1"},
            {},
            "node-1",
            id="JobSet: the replicated job's Job",
        ),
        pytest.param(
            {m.JOBSET_REPLICATED_JOB_LABEL: "launcher"},
            {},
            "launcher",
            id="JobSet without a job index",
        ),
        pytest.param(
            {m.TASK_LABEL: "ps", m.JOBSET_REPLICATED_JOB_LABEL: "node"},
            {},
            "ps",
            id="our label wins over JobSet's",
        ),
        pytest.param(None, None, "worker", id="no labels or annotations at all"),
    ],
)
def test_a_pods_task(
    labels: dict[str, str] | None, annotations: dict[str, str] | None, task: str
) -> None:
    assert m.task_name({"labels": labels, "annotations": annotations}) == task


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("four", "annotation gang-extender.io/min-available='four' is not a whole number"),
        (["4"], "annotation gang-extender.io/min-available=['4'] is not a whole number"),
        ("0", "annotation gang-extender.io/min-available='0' must be >= 1"),
    ],
)
def test_a_bad_min_available_says_which_and_why(raw: object, message: str) -> None:
    with pytest.raises(m.MembershipError) as err:
        m.min_available({"annotations": {m.MIN_AVAILABLE_ANNOTATION: raw}})
    assert str(err.value) == message


def test_min_available_of_1_is_a_gang_of_one_and_absent_is_none() -> None:
    assert m.min_available({"annotations": {m.MIN_AVAILABLE_ANNOTATION: "1"}}) == 1
    assert m.min_available({}) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "master",
            "annotation gang-extender.io/tasks='master': expected 'task=count,...' with "
            "lower-case DNS-label task names, got 'master'",
        ),
        (
            "worker=2, -ps=1",
            "annotation gang-extender.io/tasks='worker=2, -ps=1': expected 'task=count,...' "
            "with lower-case DNS-label task names, got '-ps=1'",
        ),
        (
            "worker=x",
            "annotation gang-extender.io/tasks='worker=x': count 'x' is not a whole number",
        ),
        (
            "worker=1=2",
            "annotation gang-extender.io/tasks='worker=1=2': count '1=2' is not a whole number",
        ),
        ("worker=0", "annotation gang-extender.io/tasks='worker=0': counts must be >= 1"),
        (
            "worker=1,worker=2",
            "annotation gang-extender.io/tasks='worker=1,worker=2': task 'worker' twice",
        ),
        (" , ", "annotation gang-extender.io/tasks=' , ' names no task"),
    ],
)
def test_a_bad_task_layout_says_which_and_why(text: str, message: str) -> None:
    with pytest.raises(m.MembershipError) as err:
        m.parse_task_layout(text)
    assert str(err.value) == message


def test_a_task_layout_skips_empty_parts_and_keeps_a_count_of_1() -> None:
    assert m.parse_task_layout("master=1,,worker=3,") == {"master": 1, "worker": 3}
    assert m.task_layout({"annotations": {m.TASKS_ANNOTATION: "w=1"}}) == {"w": 1}
    assert m.task_layout({}) is None


@pytest.mark.parametrize(
    ("labels", "annotations", "message"),
    [
        (
            {},
            {m.TASK_INDEX_ANNOTATION: "x"},
            "annotation gang-extender.io/task-index='x' is not a whole number",
        ),
        (
            {},
            {m.JOB_COMPLETION_INDEX_ANNOTATION: "-1"},
            "annotation batch.kubernetes.io/job-completion-index='-1' must be >= 0",
        ),
        (
            {m.STATEFULSET_POD_INDEX_LABEL: "one"},
            {},
            "label apps.kubernetes.io/pod-index='one' is not a whole number",
        ),
    ],
)
def test_a_bad_index_says_which_and_why(
    labels: dict[str, str], annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(m.MembershipError) as err:
        m.explicit_task_index({"labels": labels, "annotations": annotations})
    assert str(err.value) == message


def test_index_0_is_an_index_and_the_explicit_annotation_wins_over_a_job_index() -> None:
    assert m.explicit_task_index({"annotations": {m.TASK_INDEX_ANNOTATION: "0"}}) == 0
    both = {m.TASK_INDEX_ANNOTATION: "5", m.JOB_COMPLETION_INDEX_ANNOTATION: "2"}
    assert m.explicit_task_index({"annotations": both}) == 5


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("a" * 63, True),
        ("a" * 64, False),
        ("w-1", True),
        ("w-", False),
        ("W", False),
        ("", False),
    ],
)
def test_a_dns_label_is_at_most_63_lower_case_characters(text: str, ok: bool) -> None:
    assert m.is_dns_label(text) is ok
