"""`spec.workloadRef` of a pod (domain/objects/membership.py, `workload_ref`): a podGroup that
is not a string is refused with what to set, as a missing one is."""

from __future__ import annotations

import pytest

from extender.domain.objects.membership import MembershipError, workload_ref


@pytest.mark.parametrize("pod_group", [5, "", None])
def test_a_pod_group_that_is_not_a_name_is_refused(pod_group: object) -> None:
    spec = {"workloadRef": {"name": "train", "podGroup": pod_group}}
    with pytest.raises(MembershipError, match="must set both name and podGroup"):
        workload_ref(spec)
