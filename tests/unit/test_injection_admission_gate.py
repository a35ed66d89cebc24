"""The webhook's admission gate: members of ours created behind it, only with the setting."""

from __future__ import annotations

from typing import Any

import pytest

from extender.admitter import Admitter
from extender.domain.objects.membership import ADMISSION_GATE
from extender.injection.admission_gate import admission_gate_ops
from extender.injection.patch import apply_patch
from tests.builders import make_pod
from tests.unit.test_admitter import FakeAllocator
from tests.unit.test_injection_gpu_routing import patch_of

GATE_OP = {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": ADMISSION_GATE}]}


@pytest.mark.parametrize(
    ("pod", "gated"),
    [
        pytest.param(make_pod("p").group("hvd").gpus(1).obj(), True, id="member of ours"),
        pytest.param(
            make_pod("p").group("hvd").gpus(1).scheduler("volcano").obj(),
            False,
            id="member of another scheduler",
        ),
        pytest.param(make_pod("p").gpus(1).obj(), False, id="not a member"),
    ],
)
def test_the_admission_gate_goes_on_members_of_ours_only_when_the_setting_is_on(
    pod: dict[str, Any], gated: bool
) -> None:
    assert GATE_OP not in patch_of(Admitter(FakeAllocator()), pod)
    assert (GATE_OP in patch_of(Admitter(FakeAllocator(), admission_gate=True), pod)) is gated


def test_the_admission_gate_joins_a_gate_the_pod_brings_once() -> None:
    pod = make_pod("p").group("hvd").gpus(1).gate("kueue.x-k8s.io/admission").obj()
    ops = patch_of(Admitter(FakeAllocator(), admission_gate=True), pod)
    gates = apply_patch(pod, ops)["spec"]["schedulingGates"]
    assert gates == [{"name": "kueue.x-k8s.io/admission"}, {"name": ADMISSION_GATE}]
    again = apply_patch(pod, ops)
    assert admission_gate_ops(again) == []  # a reinvocation adds nothing


def test_a_member_routed_to_us_is_gated_too() -> None:
    pod = make_pod("p").group("hvd").gpus(1).scheduler("default-scheduler").obj()
    ops = patch_of(Admitter(FakeAllocator(), route_gpu_pods=True, admission_gate=True), pod)
    assert apply_patch(pod, ops)["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
