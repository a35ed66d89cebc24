"""A hostile tenant on the real control plane cannot sink another team (issue 30).

One namespace (the tenant may create pods and PodGroups there, nothing more) tries
each of the issue's findings 1, 2, 3 and 5: a PodGroup with 1,000 preferred
topology labels or minMember 10^8, a pod with min-available 20000 and 20,000 tasks,
a 200 KB Kueue topology annotation, a task index of 99999999, and a 400-digit
pods-ready-timeout. Each is refused where it enters (the CRD schema, the webhook)
or held with a short message naming the limit. Meanwhile another team's gang is
bound and wired, and the service stays Ready.

The other team's time-to-bind and the service's resident memory during the attack
are printed (run with -s to see them): measured, not asserted.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import new_namespace
from extender.devcluster.stack import GangStack
from extender.domain.lifecycle.lifecycle_policy import (
    PODS_READY_TIMEOUT_ANNOTATION,
    POLICIES_ANNOTATION,
)
from extender.domain.objects.limits import MAX_GROUP_SIZE, MAX_REASON_CHARS, MAX_TOPOLOGY_LABELS
from extender.domain.objects.membership import (
    INJECT_NAMESPACE_LABEL,
    MIN_AVAILABLE_ANNOTATION,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
)
from extender.domain.objects.policy import KUEUE_PREFERRED_TOPOLOGY
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    create,
    delete_namespace,
    gang_pod,
    get_or_none,
    get_pod,
    get_podgroup,
    gpu_pool_for,
    list_pods,
    podgroup,
    unschedulable_message,
    wait_until,
)


def rss_bytes(pid: int) -> int:
    """The process's resident set size, from /proc (the service runs on this machine)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def ready(stack: GangStack) -> bool:
    """The service answers /readyz 200."""
    try:
        with urllib.request.urlopen(f"{stack.metrics_url}/readyz", timeout=5) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


def refused(raw: RawApi, namespace: str, obj: dict[str, Any]) -> str:
    """The API server's refusal of `obj` (the CRD schema's, or the webhook's denial)."""
    with pytest.raises(KubeError) as raised:
        create(raw, namespace, obj)
    assert raised.value.status in (400, 422), raised.value
    return raised.value.message


@pytest.fixture
def namespaces(
    api: k8s.ApiClient, core: k8s.CoreV1Api, gang_stack: GangStack
) -> Iterator[dict[str, str]]:
    """hostile: injected (the webhook sees its pods); hostile-plain: not injected (its
    pods reach the scheduler unwired); team: injected, the victim's."""
    injected = {INJECT_NAMESPACE_LABEL: "enabled"}
    made = {
        "hostile": new_namespace(api, "hostile", labels=injected),
        "hostile-plain": new_namespace(api, "hostile-plain"),
        "team": new_namespace(api, "team", labels=injected),
    }
    yield made
    for name in made.values():
        delete_namespace(core, name)
    # Waited for, unlike other tests' namespaces: the attack's objects (groups of the
    # size limits, refused indexes) are still reconciled while they go, and the next
    # test's gangs in this session wait behind that (its wiring was once late).
    for name in made.values():
        wait_until(
            lambda name=name: namespace_gone(core, name), timeout=180, what=f"{name} deleted"
        )


def namespace_gone(core: k8s.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_a_hostile_tenant_is_refused_while_another_teams_gang_binds_and_is_wired(
    api: k8s.ApiClient,
    raw: RawApi,
    gang_stack: GangStack,
    namespaces: dict[str, str],
    request: pytest.FixtureRequest,
) -> None:
    assert gang_stack.service is not None
    pid = gang_stack.service.pid
    selector = gpu_pool_for(api, request, gpus=4, label="e2e-hostile-pool")
    hostile, plain, team = namespaces["hostile"], namespaces["hostile-plain"], namespaces["team"]
    rss_before = rss_bytes(pid)
    tag = uuid.uuid4().hex[:6]
    attack_started = time.monotonic()

    # ---- the attack ----
    # Finding 1: 1,000 preferred topology labels; the CRD schema refuses the PodGroup.
    labels = [f"example.com/level-{i}" for i in range(1_000)]
    said = refused(raw, hostile, podgroup(f"labels-{tag}", 2, topology={"preferred": labels}))
    assert str(MAX_TOPOLOGY_LABELS) in said
    # Finding 3: minMember 10^8; refused by the schema.
    said = refused(raw, hostile, podgroup(f"huge-{tag}", 10**8))
    assert str(MAX_GROUP_SIZE) in said
    # Finding 2: min-available 20000 and 20,000 tasks (164 KB). The webhook denies it in
    # an injected namespace; elsewhere it is held with a short reason naming the limit.
    tasks = ",".join(f"t{i}=1" for i in range(20_000))
    big = {MIN_AVAILABLE_ANNOTATION: "20000", TASKS_ANNOTATION: tasks}
    said = refused(
        raw, hostile, gang_pod(f"big-{tag}", "big", gpus=1, node_selector=selector, annotations=big)
    )
    assert f"at most {MAX_GROUP_SIZE}" in said or "at most 64 tasks" in said
    create(raw, plain, gang_pod("big-0", "big", gpus=1, node_selector=selector, annotations=big))
    # A 200 KB Kueue topology annotation, echoed whole into every node's reason before.
    kueue = {MIN_AVAILABLE_ANNOTATION: "2", KUEUE_PREFERRED_TOPOLOGY: "x/" + "y" * 200_000}
    create(
        raw, plain, gang_pod("kueue-0", "kueue", gpus=1, node_selector=selector, annotations=kueue)
    )
    # Finding 3: a task index of 99999999 with min-available 1: denied by the webhook.
    index = {MIN_AVAILABLE_ANNOTATION: "1", TASK_INDEX_ANNOTATION: "99999999"}
    said = refused(
        raw, hostile, gang_pod(f"index-{tag}", "index", node_selector=selector, annotations=index)
    )
    assert "index" in said and str(MAX_GROUP_SIZE) in said
    # Finding 5: a 400-digit pods-ready-timeout (OverflowError every tick before).
    policy = {
        MIN_AVAILABLE_ANNOTATION: "1",
        POLICIES_ANNOTATION: "PodsNotReady=RestartJob",
        PODS_READY_TIMEOUT_ANNOTATION: "9" * 400,
    }
    create(raw, hostile, gang_pod("policy-0", "policy", node_selector=selector, annotations=policy))
    attack_done = time.monotonic()

    # ---- the other team's gang, during the attack ----
    started = time.monotonic()
    for i in range(2):
        member = gang_pod(
            f"train-{i}",
            "train",
            gpus=1,
            node_selector=selector,
            annotations={MIN_AVAILABLE_ANNOTATION: "2"},
        )
        create(raw, team, member)
    peak = rss_bytes(pid)

    def both_bound() -> bool:
        nonlocal peak
        peak = max(peak, rss_bytes(pid))
        return len(bound(list_pods(raw, team))) == 2

    wait_until(both_bound, what="the team's gang bound during the attack")
    time_to_bind = time.monotonic() - started
    configmap = wait_until(
        lambda: get_or_none(
            raw, path_of("api", "v1", "namespaces", team, "configmaps", "train-svc")
        ),
        what="the team's ConfigMap train-svc",
    )
    assert len(configmap["data"]["hostfile"].splitlines()) == 2
    assert ready(gang_stack)

    # ---- the hostile pods: held, with short reasons that name the limit ----
    def held_message(namespace: str, name: str) -> str:
        return unschedulable_message(get_pod(raw, namespace, name))

    big_reason = wait_until(lambda: held_message(plain, "big-0"), what="big-0's held reason")
    assert f"at most {MAX_GROUP_SIZE}" in big_reason
    assert len(big_reason) <= 2 * MAX_REASON_CHARS  # kube-scheduler adds "0/N nodes are available"
    kueue_reason = wait_until(lambda: held_message(plain, "kueue-0"), what="kueue-0's held reason")
    assert KUEUE_PREFERRED_TOPOLOGY in kueue_reason
    assert len(kueue_reason) <= 2 * MAX_REASON_CHARS

    def policy_refused() -> str:
        pg = get_podgroup(raw, hostile, "policy") or {}
        return next(
            (
                str(c.get("message"))
                for c in (pg.get("status") or {}).get("conditions") or []
                if c.get("reason") == "InvalidPolicy"
            ),
            "",
        )

    policy_reason = wait_until(policy_refused, what="group policy's InvalidPolicy condition")
    assert PODS_READY_TIMEOUT_ANNOTATION in policy_reason
    assert len(policy_reason) <= MAX_REASON_CHARS
    assert ready(gang_stack)
    log = Path(gang_stack.service.log_path).read_text(errors="replace")
    assert "OverflowError" not in log and "RecursionError" not in log

    print(
        f"\nhostile tenant: attack sent in {attack_done - attack_started:.1f}s; "
        f"the team's gang bound in {time_to_bind:.2f}s; service RSS {rss_before / 2**20:.0f} MiB "
        f"before, {peak / 2**20:.0f} MiB peak during the attack"
    )
