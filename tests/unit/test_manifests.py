"""deploy/, the Dockerfile and the examples, read as files (no cluster, no kubectl).

The e2e twin, tests/e2e/test_deploy.py, renders deploy/ with kustomize and has the
API server accept it; these checks are the properties a reviewer looks for:
non-root, probes, resources, least-privilege RBAC, and that the pieces agree with
each other and with the code (ports, names, metric names, the pinned version).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.config import Settings
from extender.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S_VERSION = re.search(
    r"^DEFAULT_K8S_VERSION=(\S+)$", (REPO / "hack" / "build-control-plane.sh").read_text(), re.M
)


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def objects() -> list[dict[str, Any]]:
    """Every Kubernetes object under deploy/ (kustomization files and `$patch: delete`
    entries of overlays excluded: they name an object, they are none)."""
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in load(path):
            if "kustomize.config.k8s.io" not in doc.get("apiVersion", "") and "$patch" not in doc:
                found.append({**doc, "_file": str(path.relative_to(REPO))})
    return found


def one(kind: str, name: str) -> dict[str, Any]:
    matches = [
        o
        for o in objects()
        if o["kind"] == kind and o["metadata"]["name"] == name and "overlays" not in o["_file"]
    ]
    assert len(matches) == 1, f"{kind} {name}: {[m['_file'] for m in matches]}"
    return matches[0]


SERVICE = "gang-extender"
SCHEDULER = "gang-scheduler"


def pod_spec(name: str) -> dict[str, Any]:
    return one("Deployment", name)["spec"]["template"]["spec"]


def container(name: str) -> dict[str, Any]:
    containers = pod_spec(name)["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.mark.parametrize(
    "path", sorted(DEPLOY.rglob("*.yaml")), ids=lambda p: str(p.relative_to(DEPLOY))
)
def test_every_yaml_file_in_deploy_parses(path: Path) -> None:
    docs = load(path)
    assert docs, f"{path} holds no document"
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), (
            f"{path}: a document without apiVersion/kind"
        )


def test_kustomizations_name_only_files_that_exist() -> None:
    for path in DEPLOY.rglob("kustomization.yaml"):
        (spec,) = load(path)
        entries = list(spec.get("resources", [])) + [
            p["path"] for p in spec.get("patches", []) if "path" in p
        ]
        entries += [f for gen in spec.get("configMapGenerator", []) for f in gen.get("files", [])]
        for entry in entries:
            assert (path.parent / entry).exists(), f"{path.relative_to(REPO)} names missing {entry}"


@pytest.mark.parametrize("name", [SERVICE, SCHEDULER])
def test_deployments_run_as_non_root_with_nothing_to_escalate(name: str) -> None:
    spec, main = pod_spec(name), container(name)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    security = main["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in security


@pytest.mark.parametrize("name", [SERVICE, SCHEDULER])
def test_deployments_have_probes_resources_and_two_replicas(name: str) -> None:
    deployment = one("Deployment", name)
    main = container(name)
    assert deployment["spec"]["replicas"] == 2
    assert main["livenessProbe"] and main["readinessProbe"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(main["resources"][kind]), f"{name} {kind}"


def test_the_service_is_ready_only_as_leader_with_its_identity_and_a_writable_tls_dir() -> None:
    main = container(SERVICE)
    health = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert "--leader-elect" in main["args"]
    env = {e["name"]: e for e in main["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    tls_dir = next(a for a in main["args"] if a.startswith("--tls-dir=")).removeprefix("--tls-dir=")
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(SERVICE)["volumes"]}
    assert "emptyDir" in volumes[mounts[tls_dir]], (
        "readOnlyRootFilesystem needs a writable --tls-dir"
    )
    defaults = Settings()
    assert health == {
        "extender": defaults.extender_port,
        "webhook": defaults.webhook_port,
        "metrics": defaults.metrics_port,
    }


def test_the_service_fronts_the_ports_the_scheduler_and_the_webhook_call() -> None:
    service = one("Service", SERVICE)
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert (
        service["spec"]["selector"] == one("Deployment", SERVICE)["spec"]["selector"]["matchLabels"]
    )
    assert "publishNotReadyAddresses" not in service["spec"], (
        "only the Ready leader may get traffic"
    )
    (config,) = load(DEPLOY / "scheduler" / "scheduler-config.yaml")
    url = config["extenders"][0]["urlPrefix"]
    assert url == f"https://{SERVICE}.gang-system.svc:{ports['extender']}"
    assert f"{SERVICE}.gang-system.svc" in Settings().tls_hosts, (
        "the self-managed cert must cover the Service name"
    )
    (webhook,) = load(DEPLOY / "webhook.yaml")
    target = webhook["webhooks"][0]["clientConfig"]["service"]
    assert (target["namespace"], target["name"], target["port"]) == (
        "gang-system",
        SERVICE,
        ports["webhook"],
    )
    metrics = one("Service", "gang-extender-metrics")["spec"]
    assert metrics["publishNotReadyAddresses"] is True and metrics["clusterIP"] == "None"


def test_pdb_covers_the_service_pods() -> None:
    pdb = one("PodDisruptionBudget", SERVICE)["spec"]
    assert (
        pdb["selector"]["matchLabels"]
        == one("Deployment", SERVICE)["spec"]["selector"]["matchLabels"]
    )
    assert pdb["maxUnavailable"] == 1
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow", (
        "the never-Ready standby must stay evictable"
    )


def test_the_gang_scheduler_is_the_pinned_upstream_image_running_the_deploy_config() -> None:
    assert K8S_VERSION is not None
    main = container(SCHEDULER)
    assert main["image"] == f"registry.k8s.io/kube-scheduler:{K8S_VERSION.group(1)}"
    (config,) = load(DEPLOY / "scheduler" / "scheduler-config.yaml")
    config_arg = next(a for a in main["command"] if a.startswith("--config="))
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(SCHEDULER)["volumes"]}
    config_dir = str(Path(config_arg.removeprefix("--config=")).parent)
    assert config_arg.endswith("/scheduler-config.yaml")
    config_volume = next(n for n, p in mounts.items() if p == config_dir)
    assert volumes[config_volume]["configMap"]["name"] == "gang-scheduler-config"
    ca_file = Path(config["extenders"][0]["tlsConfig"]["caFile"])
    ca_volume = next(n for n, p in mounts.items() if p == str(ca_file.parent))
    assert volumes[ca_volume]["configMap"] == {
        "name": "gang-extender-ca",
        "items": [{"key": "ca.crt", "path": ca_file.name}],
    }
    (generator,) = load(DEPLOY / "scheduler" / "kustomization.yaml")[0]["configMapGenerator"]
    assert generator["name"] == "gang-scheduler-config" and generator["files"] == [
        "scheduler-config.yaml"
    ]
    assert config["leaderElection"]["resourceName"] in _lease_names(SCHEDULER)


def test_the_gang_scheduler_retries_a_refused_member_within_a_second() -> None:
    """A member refused while its gang was incomplete is moved to the backoff queue by
    the event that completes the gang; kube-scheduler's default backoff (1s doubling
    to 10s) would keep it there up to 10s after its gang was planned. 1s is the
    lowest podInitialBackoffSeconds the scheduler accepts, and the cap must not be
    below it (the scheduler refuses such a config)."""
    (config,) = load(DEPLOY / "scheduler" / "scheduler-config.yaml")
    assert config["podInitialBackoffSeconds"] == 1
    assert config["podMaxBackoffSeconds"] == 1


def _lease_names(account: str) -> set[str]:
    names: set[str] = set()
    for binding in (o for o in objects() if o["kind"] == "RoleBinding"):
        if any(s["name"] == account for s in binding["subjects"]):
            ours = [
                o
                for o in objects()
                if o["kind"] == "Role" and o["metadata"]["name"] == binding["roleRef"]["name"]
            ]
            for rule in (ours[0] if ours else {}).get("rules", []):  # built-in Roles have no file
                if "leases" in rule["resources"]:
                    names.update(rule.get("resourceNames", []))
    return names


def test_the_service_may_renew_exactly_its_configured_lease() -> None:
    assert _lease_names(SERVICE) == {Settings().lease_name}


def _rules() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{o['kind']} {o['metadata']['name']}", rule)
        for o in objects()
        if o["kind"] in ("Role", "ClusterRole")
        for rule in o.get("rules", [])
    ]


def test_rbac_has_no_wildcards() -> None:
    assert _rules(), "no RBAC rules found"
    for where, rule in _rules():
        for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
            assert "*" not in rule.get(field, []), f"{where}: wildcard in {field}: {rule}"


def test_rbac_never_deletes_nor_lists_secrets() -> None:
    for where, rule in _rules():
        forbidden = {"delete", "deletecollection", "escalate", "bind", "impersonate"}
        if where == "ClusterRole gang-extender-namespace" and rule["resources"] == ["pods"]:
            # Lifecycle policies delete a failed gang's member pods, only in namespaces
            # bound to this role (docs/deploy.md#rbac); nothing else is ever deleted.
            forbidden.discard("delete")
        assert not forbidden & set(rule["verbs"]), f"{where}: {rule}"
        if "secrets" in rule["resources"]:
            assert not {"list", "watch"} & set(rule["verbs"]), f"{where} may list Secrets: {rule}"


def test_every_pod_write_is_granted_per_namespace_only() -> None:
    """Issue 30: pods/eviction was cluster-wide though used only where bound."""
    cluster_wide = {
        resource
        for where, rule in _rules()
        if where == "ClusterRole gang-extender" and set(rule["verbs"]) - {"get", "list", "watch"}
        for resource in rule["resources"]
    }
    assert not {r for r in cluster_wide if r.startswith("pods")} - {"pods/binding"}
    per_namespace = {
        (resource, verb)
        for where, rule in _rules()
        if where == "ClusterRole gang-extender-namespace"
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("pods/eviction", "create") in per_namespace


def test_the_node_fence_policy_guards_owners_and_finalizers() -> None:
    policy = one("ValidatingAdmissionPolicy", "gang-extender-node-fence")
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for field in ("ownerReferences", "finalizers", "labels", "annotations", "taints"):
        assert f"object.metadata.?{field}" in expressions or f".{field}" in expressions, field
    assert "oldObject.metadata.?ownerReferences" in expressions
    assert "oldObject.metadata.?finalizers" in expressions


def test_the_scheduler_is_bound_to_the_builtin_scheduler_roles() -> None:
    bound = {
        o["roleRef"]["name"]
        for o in objects()
        if o["kind"] == "ClusterRoleBinding" and any(s["name"] == SCHEDULER for s in o["subjects"])
    }
    assert bound == {"system:kube-scheduler", "system:volume-scheduler"}


def test_the_namespace_enforces_the_restricted_pod_security_standard() -> None:
    labels = one("Namespace", "gang-system")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_optional_coscheduling_crd_matches_scheduler_plugins() -> None:
    (crd,) = load(DEPLOY / "crds" / "optional" / "podgroups.scheduling.x-k8s.io.yaml")
    assert crd["spec"]["group"] == "scheduling.x-k8s.io"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert {"minMember", "scheduleTimeoutSeconds", "minResources"} <= set(
        schema["spec"]["properties"]
    )
    assert {"phase", "running", "succeeded", "failed"} <= set(schema["status"]["properties"])


# Short names of other PodGroup CRDs a cluster may have: scheduler-plugins (the
# optional CRD here) and Volcano (scheduling.volcano.sh: pg, podgroup-v1beta1).
VOLCANO_PODGROUP_SHORT_NAMES = {"pg", "podgroup-v1beta1"}


def test_the_optional_volcano_crd_matches_volcanos_types() -> None:
    """volcano.sh/apis scheduling/v1beta1 PodGroupSpec/PodGroupStatus, as Volcano's CRD serves them."""
    (crd,) = load(DEPLOY / "crds" / "optional" / "podgroups.scheduling.volcano.sh.yaml")
    assert crd["metadata"]["name"] == "podgroups.scheduling.volcano.sh"
    assert set(crd["spec"]["names"]["shortNames"]) == VOLCANO_PODGROUP_SHORT_NAMES
    (version,) = crd["spec"]["versions"]
    # No status subresource, as Volcano's: the service writes status with the object.
    assert version["name"] == "v1beta1" and version["subresources"] == {}
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert {"minMember", "minTaskMember", "minResources", "queue", "priorityClassName"} <= set(
        schema["spec"]["properties"]
    )
    assert set(schema["status"]["properties"]) == {
        "phase",
        "conditions",
        "running",
        "succeeded",
        "failed",
    }
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["STATUS"] == ".status.phase" and columns["RUNNINGS"] == ".status.running"


def test_our_podgroup_crd_keeps_its_plural_but_shares_no_short_name_with_another_podgroup() -> None:
    (ours,) = load(DEPLOY / "crds" / "podgroups.scheduling.gang-extender.io.yaml")
    (theirs,) = load(DEPLOY / "crds" / "optional" / "podgroups.scheduling.x-k8s.io.yaml")
    names, other = ours["spec"]["names"], theirs["spec"]["names"]
    assert ours["metadata"]["name"] == "podgroups.scheduling.gang-extender.io"
    assert (names["plural"], names["kind"]) == ("podgroups", "PodGroup")
    assert names["shortNames"], "a short name of our own (`kubectl get gang`)"
    taken = set(other.get("shortNames", [])) | VOLCANO_PODGROUP_SHORT_NAMES
    assert not set(names["shortNames"]) & taken
    assert names.get("categories") == ["gang-extender"]
    assert not set(names["categories"]) & set(other.get("categories", []))


# ---- monitoring: every metric named exists in extender/metrics.py ----
def _exported_names() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "histogram":
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum"))
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def _referenced_names(text: str) -> set[str]:
    return set(re.findall(r"\bgang_extender_[a-z_]+\b", text))


def test_alerts_and_dashboard_use_only_metrics_the_service_exports() -> None:
    exported = _exported_names()
    rules = one("PrometheusRule", "gang-extender")
    exprs = "\n".join(r["expr"] for g in rules["spec"]["groups"] for r in g["rules"])
    dashboard = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    queries = "\n".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for where, text in (("PrometheusRule", exprs), ("dashboard", queries)):
        referenced = _referenced_names(text)
        assert referenced, where
        assert referenced <= exported, (
            f"{where} names unknown metrics: {sorted(referenced - exported)}"
        )
    alerts = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"]}
    assert {
        "GangExtenderGangsStuckPending",
        "GangExtenderBindBarrierTimeouts",
        "GangExtenderRequestErrors",
    } <= alerts


def test_the_dashboard_shows_every_metric() -> None:
    dashboard = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    queries = "\n".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    families = {
        f.name + ("_total" if f.type == "counter" else "") for f in Metrics().registry.collect()
    }
    # prometheus-client's standard collectors: the ones to alert on are shown (memory,
    # CPU, fds); the rest (python_info, gc, virtual memory, start time) are for queries.
    not_shown = {
        "python_info",
        "python_gc_objects_collected_total",
        "python_gc_objects_uncollectable_total",
        "python_gc_collections_total",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
    }
    assert not_shown <= families, "the standard collectors are registered"
    families -= not_shown
    shown = {name for name in families if re.search(rf"\b{name}(_bucket|_count|_sum)?\b", queries)}
    assert shown == families, f"not on the dashboard: {sorted(families - shown)}"


def test_the_servicemonitor_scrapes_the_metrics_service() -> None:
    monitor = one("ServiceMonitor", "gang-extender")["spec"]
    service = one("Service", "gang-extender-metrics")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}


# ---- the image ----
def test_dockerfile_is_multi_stage_pinned_and_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base is not None and re.fullmatch(
        r"python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base.group(1)
    )
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?$", text, re.M)
    assert stages == [("${PYTHON_IMAGE}", "builder"), ("${PYTHON_IMAGE}", "")]
    final = text[text.rindex("\nFROM ") :]
    assert re.search(r"^USER 65532:65532$", final, re.M)
    assert re.search(r'^ENTRYPOINT \["gang-extender", "serve"\]$', final, re.M)
    assert "pip wheel" in text[: text.rindex("\nFROM ")], "the wheel is built in the builder stage"
    assert not re.search(r"apt-get|gcc|build-essential", final), "no build tools in the final image"
    ignore = (REPO / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:1] == ["*"], ".dockerignore is an allow-list"
    for needed in ("pyproject.toml", "README.md", "constraints.txt", "extender/"):
        assert f"!{needed}" in ignore


def test_constraints_pin_every_runtime_dependency() -> None:
    pins = dict(
        line.split("==")
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    project = (REPO / "pyproject.toml").read_text()
    deps = re.findall(
        r'^\s+"([A-Za-z0-9_.-]+)[<>=!~]', project.split("[project.optional-dependencies]")[0], re.M
    )
    assert deps
    for dep in deps:
        assert dep.lower().replace("_", "-") in pins, f"{dep} is not pinned in constraints.txt"


# ---- examples ----
def test_deepspeed_example_is_an_indexed_job_of_four_two_gpu_workers() -> None:
    docs = {d["kind"]: d for d in load(REPO / "examples" / "deepspeed" / "deepspeed-job.yaml")}
    group, job = docs["PodGroup"], docs["Job"]
    assert group["spec"]["minMember"] == 4
    assert (
        job["spec"]["completionMode"] == "Indexed"
        and job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    )
    template = job["spec"]["template"]
    assert template["metadata"]["labels"]["gang-extender.io/group"] == group["metadata"]["name"]
    assert template["spec"]["schedulerName"] == "gang-extender"
    (main,) = template["spec"]["containers"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "deepspeed --hostfile /etc/volcano/hostfile" in main["command"][-1]


def test_mpijob_example_uses_the_scheduler_plugins_podgroup_and_label() -> None:
    docs = load(REPO / "examples" / "mpijob" / "mpijob.yaml")
    (group,) = [d for d in docs if d["kind"] == "PodGroup"]
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    workloads = [d for d in docs if d["kind"] in ("Job", "StatefulSet")]
    members = 0
    for workload in workloads:
        template = workload["spec"]["template"]
        assert (
            template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
            == group["metadata"]["name"]
        )
        assert template["spec"]["schedulerName"] == "gang-extender"
        members += workload["spec"].get("replicas", 1)
    assert members == group["spec"]["minMember"]


def test_only_the_gang_scheduler_may_reach_the_extender_port() -> None:
    # The extender binds what it is asked to and does not authenticate its client.
    policy = one("NetworkPolicy", SERVICE)
    service_labels = one("Deployment", SERVICE)["spec"]["template"]["metadata"]["labels"]
    scheduler_labels = one("Deployment", SCHEDULER)["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"] for p in pod_spec(SERVICE)["containers"][0]["ports"]}
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= service_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = policy["spec"]["ingress"]
    by_port = {p["port"]: rule for rule in rules for p in rule["ports"]}
    assert set(by_port) == ports == {"extender", "webhook", "metrics"}
    extender_from = by_port["extender"]["from"]
    # The gang scheduler, and `helm test`'s pod (charts/.../templates/tests): both in
    # gang-system (no namespaceSelector), both presenting the scheduler's client cert.
    assert [f["podSelector"]["matchLabels"] for f in extender_from] == [
        {"app.kubernetes.io/name": scheduler_labels["app.kubernetes.io/name"]},
        {"app.kubernetes.io/component": "helm-test"},
    ]
    assert all("namespaceSelector" not in f for f in extender_from)
    assert "from" not in by_port["webhook"] and "from" not in by_port["metrics"]


def _cluster_wide_rules(account: str) -> list[dict[str, Any]]:
    """Rules of every ClusterRole bound to `account` by a ClusterRoleBinding."""
    names = {
        o["roleRef"]["name"]
        for o in objects()
        if o["kind"] == "ClusterRoleBinding" and any(s["name"] == account for s in o["subjects"])
    }
    return [
        rule
        for o in objects()
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] in names
        for rule in o.get("rules", [])
    ]


def test_the_service_writes_pods_secrets_configmaps_services_only_per_namespace() -> None:
    # Cluster-wide, a patch on pods is a container image change anywhere (kube-system
    # included); Secrets, ConfigMaps and Services are written only where gangs run.
    for rule in _cluster_wide_rules(SERVICE):
        if "" not in rule.get("apiGroups", []):
            continue
        written = {"create", "patch", "update", "get"} & set(rule["verbs"])
        assert not (written and {"secrets", "configmaps", "services"} & set(rule["resources"])), (
            rule
        )
        assert not ("pods" in rule["resources"] and {"patch", "update"} & set(rule["verbs"])), rule
    namespaced = one("ClusterRole", "gang-extender-namespace")
    assert {r for rule in namespaced["rules"] for r in rule["resources"]} == {
        "pods",
        "pods/eviction",
        "pods/status",
        "services",
        "configmaps",
        "secrets",
    }
    assert not any(
        o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == "gang-extender-namespace"
        for o in objects()
    ), "gang-extender-namespace must only be bound per namespace"


def test_the_shared_ca_is_read_and_patched_by_name_only() -> None:
    role = one("Role", "gang-extender-ca")
    assert role["metadata"]["namespace"] == "gang-system"
    # The service's own objects there: the shared CA, kube-scheduler's client
    # certificate and the webhook's path token. Nothing else may be read or patched.
    ours = {"gang-extender-ca", "gang-extender-scheduler-client", "gang-extender-webhook-path"}
    named: set[str] = set()
    for rule in role["rules"]:
        if set(rule["verbs"]) != {"create"}:
            assert rule["resourceNames"], rule
            assert set(rule["resourceNames"]) <= ours, rule
            named |= set(rule["resourceNames"])
    assert named == ours


def test_no_webhook_entry_pins_a_path_the_service_writes() -> None:
    """The service writes /mutate/<token> into every entry; a re-apply must not undo it."""
    config = one("MutatingWebhookConfiguration", "gang-extender")
    for webhook in config["webhooks"]:
        assert "path" not in webhook["clientConfig"]["service"], webhook["name"]
