"""kubelet's own admission refuses a member: the gang says so, it does not hang."""

from __future__ import annotations

from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import events, list_pods, podgroup_status, wait_until
from tests.real.conftest import GPUS_PER_NODE
from tests.real.real_jobs import START_SECONDS, launch, member


def test_a_member_kubelet_refuses_for_gpus_fails_the_gang_with_the_reason(
    raw: RawApi, namespace: str, real_node_names: list[str]
) -> None:
    # Pinned by the user to a node with fewer GPUs than it asks: no scheduler sees it,
    # kubelet's device manager counts and refuses it. For a device plugin's resource
    # kubelet says UnexpectedAdmissionError ("Allocate failed due to requested number
    # of devices unavailable for nvidia.com/gpu"), not OutOfnvidia.com/gpu.
    pinned = member("greedy-0", "greedy", "worker", gpus=GPUS_PER_NODE + 1)
    pinned["spec"]["nodeName"] = real_node_names[0]
    launch(
        raw,
        namespace,
        "greedy",
        [pinned, member("greedy-1", "greedy", "worker")],
        policies=[{"event": "PodFailed", "action": "RestartJob"}],
        maxRetry=0,
    )
    refused = wait_until(
        lambda: next(
            (
                p
                for p in list_pods(raw, namespace)
                if p["metadata"]["name"] == "greedy-0" and p["status"].get("phase") == "Failed"
            ),
            None,
        ),
        timeout=START_SECONDS,
        what="kubelet to refuse greedy-0",
    )
    assert refused["status"]["reason"] == "UnexpectedAdmissionError"
    assert "nvidia.com/gpu" in refused["status"]["message"]
    wait_until(
        lambda: podgroup_status(raw, namespace, "greedy").get("phase") == "Failed",
        timeout=START_SECONDS,
        what="the PodGroup phase Failed",
    )
    failed = wait_until(lambda: events(raw, namespace, "GangFailed"), what="a GangFailed Event")
    assert "greedy-0" in failed[0]["message"], failed[0]["message"]
    assert "UnexpectedAdmissionError" in failed[0]["message"], failed[0]["message"]
