"""Kubeflow Trainer v2 and JobSet beside gang-extender: the objects they make, as they make them.

Neither controller is served here as a Go module, so the test creates what they
would for a TrainJob `llama` of an MPI runtime (a launcher and 2 nodes of 2 GPUs):

- the group: with Trainer's `coscheduling` podGroupPolicy a scheduler-plugins
  PodGroup named after the TrainJob and the pod label `scheduling.x-k8s.io/pod-group`;
  with its `volcano` policy a Volcano PodGroup and Volcano's key
  `scheduling.k8s.io/group-name` as a pod *label*;
- JobSet's headless Service named after the JobSet (= the TrainJob), selecting
  `jobset.sigs.k8s.io/jobset-name`;
- one Indexed Job per replicated job (`llama-launcher-0`, `llama-node-0`), whose pods
  carry JobSet's labels and `subdomain: llama`, so the Job controller names them
  `llama-<replicatedjob>-<job-index>-<index>`.

gang-extender places the three whole, takes `<replicatedjob>-<job-index>` as the
task (so its hostnames are JobSet's own), uses JobSet's Service instead of refusing
it as a foreign object in the way, and wires the group (hostfile, SSH Secret).
The pods are created gated and let go with a pod IP (`hold_unready`): KWOK marks a
Job's pod Succeeded the moment it runs, and a finished group is not wired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from extender.devcluster.stack import (
    DEPLOY,
    apply_object,
    load_yaml_documents,
    wait_crd_established,
)
from extender.domain.objects.membership import (
    COSCHEDULING_GROUP_LABEL,
    JOBSET_JOB_INDEX_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    VOLCANO_GROUP_ANNOTATION,
)
from extender.injection.names import MANAGED_BY_LABEL
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.conftest import GpuPool
from tests.e2e.gang_fixtures import (
    bound,
    create_podgroup_of,
    gang_pod,
    get_or_none,
    hold_unready,
    hostfile,
    indexed_job_of,
    job_pods,
    wait_until,
)

JOBSET = "llama"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
VOLCANO_CRD = DEPLOY / "crds" / "optional" / "podgroups.scheduling.volcano.sh.yaml"
# replicated job -> (pods, GPUs each): MPI's launcher and its nodes.
REPLICATED_JOBS = {"launcher": (1, 0), "node": (2, 2)}
MEMBERS = sum(pods for pods, _ in REPLICATED_JOBS.values())


def jobset_service() -> dict[str, Any]:
    """The headless Service JobSet makes for a JobSet (network.enableDNSHostnames)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": JOBSET, "labels": {JOBSET_NAME_LABEL: JOBSET}},
        "spec": {
            "clusterIP": "None",
            "selector": {JOBSET_NAME_LABEL: JOBSET},
            "publishNotReadyAddresses": True,
        },
    }


def jobset_job(
    replicated: str, pods: int, gpus: int, group_label: dict[str, str]
) -> dict[str, Any]:
    """The Job JobSet makes for job 0 of replicated job `replicated`, its pods as
    Trainer's podGroupPolicy labels them (`group_label`)."""
    template = gang_pod("", "", gpus=gpus, gated=True)
    template["metadata"].pop("name")
    template["metadata"]["labels"] = {
        JOBSET_NAME_LABEL: JOBSET,
        JOBSET_REPLICATED_JOB_LABEL: replicated,
        JOBSET_JOB_INDEX_LABEL: "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        **group_label,
    }
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["subdomain"] = JOBSET
    job = indexed_job_of(
        f"{JOBSET}-{replicated}-0", completions=pods, parallelism=pods, template=template
    )
    job["metadata"]["labels"] = {JOBSET_NAME_LABEL: JOBSET, JOBSET_REPLICATED_JOB_LABEL: replicated}
    return job


def run_trainjob(raw: RawApi, namespace: str, pool: GpuPool, group_label: dict[str, str]) -> None:
    """JobSet's Service and Jobs for TrainJob `llama`; its pods let go once all exist."""
    raw.call(
        "POST", path_of("api", "v1", "namespaces", namespace, "services"), body=jobset_service()
    )
    made: list[dict[str, Any]] = []
    for replicated, (pods, gpus) in REPLICATED_JOBS.items():
        job = jobset_job(replicated, pods, gpus, group_label)
        job["spec"]["template"]["spec"]["nodeSelector"] = pool.node_selector
        raw.call("POST", path_of("apis", "batch", "v1", "namespaces", namespace, "jobs"), body=job)
    for replicated, (pods, _) in REPLICATED_JOBS.items():
        name = f"{JOBSET}-{replicated}-0"
        made += wait_until(
            lambda name=name, pods=pods: (
                len(found := job_pods(raw, namespace, name)) == pods and found
            ),
            what=f"the {pods} pod(s) of Job {name}",
        )
    for pod in made:
        hold_unready(raw, namespace, pod["metadata"]["name"])


def all_pods(raw: RawApi, namespace: str) -> list[dict[str, Any]]:
    return [p for r in REPLICATED_JOBS for p in job_pods(raw, namespace, f"{JOBSET}-{r}-0")]


def assert_placed_and_wired(raw: RawApi, namespace: str) -> None:
    pods = wait_until(
        lambda: len(bound(found := all_pods(raw, namespace))) == MEMBERS and found,
        what=f"the TrainJob's {MEMBERS} pods bound together",
    )
    # JobSet's hostnames kept: the task is <replicatedjob>-<job-index>.
    hosts = sorted(p["spec"]["hostname"] for p in pods)
    assert hosts == ["llama-launcher-0-0", "llama-node-0-0", "llama-node-0-1"], hosts
    assert {p["spec"]["subdomain"] for p in pods} == {JOBSET}
    lines = wait_until(
        lambda: len(found := hostfile(raw, namespace, JOBSET)) == MEMBERS and found,
        what="the group's hostfile",
    )
    # docs/deploy.md "With Kubeflow Trainer and JobSet" quotes these lines.
    assert sorted(lines) == [
        "llama-launcher-0-0.llama slots=1",
        "llama-node-0-0.llama slots=2",
        "llama-node-0-1.llama slots=2",
    ], lines
    secret = wait_until(
        lambda: get_or_none(
            raw, path_of("api", "v1", "namespaces", namespace, "secrets", f"{JOBSET}-ssh")
        ),
        what=f"Secret {JOBSET}-ssh",
    )
    assert "id_rsa" in secret["data"]
    # JobSet's Service is used as it is: not adopted, not written.
    service = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "services", JOBSET))
    assert MANAGED_BY_LABEL not in (service["metadata"].get("labels") or {})
    assert service["spec"]["selector"] == {JOBSET_NAME_LABEL: JOBSET}


def test_a_trainjob_with_the_coscheduling_policy_is_placed_whole_and_wired_with_jobset_names(
    raw: RawApi, injected_namespace: str, gpu_nodes: Callable[..., GpuPool]
) -> None:
    pool = gpu_nodes(2, gpus=2)
    create_podgroup_of(
        raw, "scheduling.x-k8s.io/v1alpha1", injected_namespace, JOBSET, minMember=MEMBERS
    )
    run_trainjob(raw, injected_namespace, pool, {COSCHEDULING_GROUP_LABEL: JOBSET})
    assert_placed_and_wired(raw, injected_namespace)


def test_a_trainjob_with_the_volcano_policy_labels_its_pods_and_is_placed_whole(
    raw: RawApi, injected_namespace: str, gpu_nodes: Callable[..., GpuPool]
) -> None:
    for doc in load_yaml_documents(VOLCANO_CRD):
        apply_object(raw, doc)
        wait_crd_established(raw, doc["metadata"]["name"])
    pool = gpu_nodes(2, gpus=2)
    create_podgroup_of(
        raw, "scheduling.volcano.sh/v1beta1", injected_namespace, JOBSET, minMember=MEMBERS
    )
    # Trainer's volcano plugin sets Volcano's key as a pod label, not an annotation.
    run_trainjob(raw, injected_namespace, pool, {VOLCANO_GROUP_ANNOTATION: JOBSET})
    assert_placed_and_wired(raw, injected_namespace)
