"""GPU routing: plain GPU pods handed to the gang scheduler, so they respect reservations."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from extender.admitter import Admitter
from extender.injection.gpu_routing import route_to_gang_scheduler, wants_routing
from extender.injection.patch import apply_patch
from tests.builders import make_pod
from tests.unit.test_admitter import FakeAllocator, request


def gpu_pod(scheduler: str | None = None, gpus: int = 1) -> dict[str, Any]:
    pod = make_pod("p").gpus(gpus).obj()
    if scheduler is None:
        del pod["spec"]["schedulerName"]
    else:
        pod["spec"]["schedulerName"] = scheduler
    return pod


@pytest.mark.parametrize(
    ("pod", "routed"),
    [
        pytest.param(gpu_pod(None), True, id="GPU pod without a scheduler name"),
        pytest.param(gpu_pod("default-scheduler"), True, id="GPU pod of the default scheduler"),
        pytest.param(gpu_pod("volcano"), False, id="GPU pod that chose another scheduler"),
        pytest.param(gpu_pod("gang-extender"), False, id="GPU pod already ours"),
        pytest.param(gpu_pod(None, gpus=0), False, id="pod without GPUs"),
    ],
)
def test_which_pods_are_routed(pod: dict[str, Any], routed: bool) -> None:
    assert wants_routing(pod) is routed
    patched = apply_patch(pod, route_to_gang_scheduler(pod))
    if routed:
        assert patched["spec"]["schedulerName"] == "gang-extender"
    else:
        assert patched == pod


def test_a_gpu_limit_alone_counts_as_a_request() -> None:
    pod = gpu_pod(None, gpus=0)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    assert wants_routing(pod)


def test_gpus_of_an_init_container_count() -> None:
    pod = gpu_pod(None, gpus=0)
    pod["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    ]
    assert wants_routing(pod)


def patch_of(admitter: Admitter, pod: dict[str, Any]) -> list[dict[str, Any]]:
    response = asyncio.run(admitter.admit(request(pod)))["response"]
    assert response["allowed"] is True
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def test_the_admitter_routes_a_plain_gpu_pod_only_when_the_setting_is_on() -> None:
    assert patch_of(Admitter(FakeAllocator()), gpu_pod(None)) == []
    assert patch_of(Admitter(FakeAllocator(), route_gpu_pods=True), gpu_pod(None)) == [
        {"op": "add", "path": "/spec/schedulerName", "value": "gang-extender"}
    ]


def test_a_group_pod_left_to_the_default_scheduler_is_wired_and_routed() -> None:
    pod = make_pod("p").group("hvd").gpus(1).scheduler("default-scheduler").obj()
    ops = patch_of(Admitter(FakeAllocator(), route_gpu_pods=True), pod)
    assert ops[-1] == {"op": "replace", "path": "/spec/schedulerName", "value": "gang-extender"}
    assert len(ops) > 1, "the group's wiring is still there"
