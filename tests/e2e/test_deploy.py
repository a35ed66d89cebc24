"""deploy/ against the real API server: what `kubectl apply -k deploy/` would do.

Rendered with the kustomize built into the pinned kubectl; everything is accepted
by a server-side dry-run; the Namespace, CRD and RBAC are really applied, and the
service accounts are then asked, verb by verb, what they may do. The scheduler
ConfigMap is the file the e2e gang scheduler runs.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.stack import SCHEDULER_CONFIG, GangStack
from tests.e2e.gang_fixtures import wait_until

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OPTIONAL_CRD = DEPLOY / "crds" / "optional" / "podgroups.scheduling.x-k8s.io.yaml"
SERVICE_SA = "system:serviceaccount:gang-system:gang-extender"
SCHEDULER_SA = "system:serviceaccount:gang-system:gang-scheduler"
# Applied for real: cluster-wide definitions and who may do what. The workloads and
# the webhook stay dry-run (the image is not on this cluster, and the session's
# gang stack owns MutatingWebhookConfiguration gang-extender).
REALLY_APPLIED = {
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def kubectl(
    cluster: LocalCluster, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}\n{result.stdout}"
        )
    return result


def render(cluster: LocalCluster, directory: Path) -> list[dict[str, Any]]:
    out = kubectl(cluster, "kustomize", str(directory)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def dry_run(cluster: LocalCluster, docs: list[dict[str, Any]]) -> str:
    """`kubectl apply --dry-run=server` of `docs`, as on a cluster without gang-extender.

    The session's gang stack may already run MutatingWebhookConfiguration
    gang-extender with a loopback `url`; applying ours over it would merge `service`
    into that and be invalid for a reason a real install never meets. So the
    webhook configuration is dry-run under another name: validated as a new object.
    """
    fresh = copy.deepcopy(docs)
    for doc in fresh:
        if doc["kind"] == "MutatingWebhookConfiguration":
            doc["metadata"]["name"] += "-dry-run"
    return kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=dump(fresh)).stdout


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def can_i(cluster: LocalCluster, user: str, verb: str, resource: str, *flags: str) -> bool:
    result = kubectl(cluster, "auth", "can-i", verb, resource, f"--as={user}", *flags, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"can-i {verb} {resource}: {result.stderr}"
    return answer == "yes"


@pytest.fixture(scope="module")
def rendered(cluster: LocalCluster) -> list[dict[str, Any]]:
    return render(cluster, DEPLOY)


@pytest.fixture(scope="module")
def applied(cluster: LocalCluster, rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespace, CRDs and RBAC really applied (the CRDs then Established).

    The optional scheduler-plugins CRD too, so `can-i` knows its resource (GangStack
    installs the same file).
    """
    definitions = [d for d in rendered if d["kind"] in REALLY_APPLIED]
    kubectl(cluster, "apply", "-f", "-", stdin=dump(definitions))
    kubectl(cluster, "apply", "-f", str(OPTIONAL_CRD))
    # An admin opts team-a in, as docs/deploy.md#rbac says; team-b is left out.
    for namespace in ("team-a", "team-b"):
        kubectl(cluster, "create", "namespace", namespace, check=False)
    kubectl(
        cluster,
        "-n",
        "team-a",
        "create",
        "rolebinding",
        "gang-extender",
        "--clusterrole=gang-extender-namespace",
        "--serviceaccount=gang-system:gang-extender",
        check=False,
    )
    for crd in ("podgroups.scheduling.gang-extender.io", "podgroups.scheduling.x-k8s.io"):
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
    return definitions


def test_deploy_renders_everything_the_install_needs(rendered) -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    for expected in [
        ("Namespace", "gang-system"),
        ("CustomResourceDefinition", "podgroups.scheduling.gang-extender.io"),
        ("ServiceAccount", "gang-extender"),
        ("ServiceAccount", "gang-scheduler"),
        ("ClusterRole", "gang-extender"),
        ("Deployment", "gang-extender"),
        ("Deployment", "gang-scheduler"),
        ("Service", "gang-extender"),
        ("PodDisruptionBudget", "gang-extender"),
        ("NetworkPolicy", "gang-extender"),
        ("MutatingWebhookConfiguration", "gang-extender"),
    ]:
        assert expected in kinds, f"{expected} missing from `kubectl kustomize deploy/`"


def deploy_md_table() -> list[str]:
    """The first cells of docs/deploy.md's table of what `kubectl apply -k deploy/` creates."""
    text = (REPO / "docs" / "deploy.md").read_text()
    start = text.index("| object (")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    return rows


def test_the_deploy_md_table_lists_every_object_apply_k_creates(bin_dir: Path) -> None:
    """Each object `kubectl kustomize deploy/` renders has a row naming its kind (as a
    word, plural allowed) and its name in backquotes (a generated ConfigMap's hash as
    `-<hash>`), so the table cannot fall behind deploy/ again."""
    out = subprocess.run(
        [str(bin_dir / "kubectl"), "kustomize", str(DEPLOY)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = deploy_md_table()
    missing = []
    for doc in (d for d in yaml.safe_load_all(out) if d):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "ConfigMap" and name.startswith("gang-scheduler-config-"):
            name = "gang-scheduler-config-<hash>"
        where = doc["metadata"].get("namespace")
        if not any(
            re.search(rf"\b{kind}s?\b", row)
            and f"`{name}`" in row
            # an object outside gang-system says where it lives
            and (where in (None, "gang-system") or f"`{where}`" in row or where in row)
            for row in rows
        ):
            missing.append(f"{kind} {where + '/' if where else ''}{name}")
    assert not missing, f"docs/deploy.md's table does not list: {', '.join(missing)}"


def test_everything_in_deploy_is_accepted_by_a_server_side_dry_run(
    cluster, rendered, applied
) -> None:
    output = dry_run(cluster, rendered)
    for doc in rendered:
        assert doc["metadata"]["name"] in output, (
            f"{doc['kind']} {doc['metadata']['name']} not in:\n{output}"
        )


def test_the_crd_is_served_with_its_printer_columns(cluster, applied) -> None:
    crd = yaml.safe_load(
        kubectl(cluster, "get", "crd", "podgroups.scheduling.gang-extender.io", "-o", "yaml").stdout
    )
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:4] == ["Phase", "Min", "Scheduled", "Running"] and columns[-1] == "Age"
    kubectl(cluster, "get", "podgroups", "-A")  # served


@pytest.mark.parametrize(
    ("verb", "resource", "flags"),
    [
        pytest.param("list", "nodes", (), id="watch cache lists nodes"),
        pytest.param("watch", "nodes", (), id="watch cache watches nodes"),
        pytest.param("list", "pods", ("-A",), id="watch cache lists every pod"),
        pytest.param("watch", "pods", ("-A",), id="watch cache watches every pod"),
        pytest.param("patch", "pods", ("-n", "team-a"), id="planned-node annotation on a member"),
        pytest.param(
            "patch",
            "pods",
            ("--subresource=status", "-n", "team-a"),
            id="planned-node nomination (nominate_planned_node)",
        ),
        pytest.param(
            "create", "pods", ("--subresource=binding", "-n", "team-a"), id="the extender binds"
        ),
        pytest.param("list", "namespaces", (), id="which namespaces opted in"),
        pytest.param("create", "events", ("-n", "team-a"), id="GangWaiting and friends"),
        pytest.param("get", "secrets", ("-n", "team-a"), id="read the group's ssh Secret by name"),
        pytest.param("create", "secrets", ("-n", "team-a"), id="create the group's ssh Secret"),
        pytest.param("patch", "configmaps", ("-n", "team-a"), id="update the group's hostfile"),
        pytest.param(
            "create", "services", ("-n", "team-a"), id="create the group's headless Service"
        ),
        pytest.param(
            "create",
            "podgroups.scheduling.gang-extender.io",
            ("-n", "team-a"),
            id="PodGroup from min-available",
        ),
        pytest.param(
            "patch",
            "podgroups.scheduling.gang-extender.io",
            ("--subresource=status", "-n", "team-a"),
            id="PodGroup status",
        ),
        pytest.param(
            "watch", "podgroups.scheduling.x-k8s.io", ("-A",), id="read scheduler-plugins PodGroups"
        ),
        pytest.param(
            "watch", "resourceslices.resource.k8s.io", (), id="read DRA devices (docs/dra.md)"
        ),
        pytest.param("list", "deviceclasses.resource.k8s.io", (), id="read DRA DeviceClasses"),
        pytest.param(
            "watch", "resourceclaims.resource.k8s.io", ("-A",), id="read DRA ResourceClaims"
        ),
        pytest.param(
            "list",
            "resourceclaimtemplates.resource.k8s.io",
            ("-A",),
            id="read DRA ResourceClaimTemplates",
        ),
        pytest.param(
            "patch",
            "mutatingwebhookconfigurations/gang-extender",
            (),
            id="its own webhook caBundle",
        ),
        pytest.param(
            "update", "leases/gang-extender-service", ("-n", "gang-system"), id="renew its Lease"
        ),
        pytest.param("create", "leases", ("-n", "gang-system"), id="create its Lease"),
        pytest.param(
            "get", "secrets/gang-extender-ca", ("-n", "gang-system"), id="read the shared CA"
        ),
        pytest.param(
            "patch",
            "configmaps/gang-extender-ca",
            ("-n", "gang-system"),
            id="publish the shared CA certificate",
        ),
        pytest.param("create", "secrets", ("-n", "gang-system"), id="create the shared CA"),
        pytest.param(
            "patch",
            "secrets/gang-extender-scheduler-client",
            ("-n", "gang-system"),
            id="re-issue kube-scheduler's client certificate",
        ),
        pytest.param(
            "get",
            "secrets/gang-extender-webhook-path",
            ("-n", "gang-system"),
            id="read the webhook's path token",
        ),
        pytest.param(
            "create", "pods", ("--subresource=binding", "-n", "team-b"), id="binds anywhere"
        ),
        pytest.param("patch", "nodes", (), id="fences reserved nodes (narrowed by a policy)"),
        pytest.param("delete", "pods", ("-n", "team-a"), id="restarts a gang where bound"),
        pytest.param("create", "pods", ("-n", "team-a"), id="recreates a bare member where bound"),
        # Gang preemption evicts whole lower-priority gangs where it is bound, through
        # the Eviction API so PodDisruptionBudgets hold (docs/podgroup.md#preemption).
        pytest.param(
            "create",
            "pods",
            ("--subresource=eviction", "-n", "team-a"),
            id="evicts preemption victims where bound",
        ),
    ],
)
def test_the_service_account_may_do_what_the_service_does(
    cluster, applied, verb, resource, flags
) -> None:
    assert can_i(cluster, SERVICE_SA, verb, resource, *flags)


@pytest.mark.parametrize(
    ("verb", "resource", "flags"),
    [
        pytest.param("delete", "pods", ("-n", "team-b"), id="no pod deletes where not bound"),
        # Issue 30: the eviction right was cluster-wide though only used where bound.
        pytest.param(
            "create",
            "pods",
            ("--subresource=eviction", "-n", "team-b"),
            id="no evictions where not bound",
        ),
        pytest.param(
            "create",
            "pods",
            ("--subresource=eviction", "-n", "kube-system"),
            id="no evictions in kube-system",
        ),
        pytest.param("create", "pods", ("-n", "team-b"), id="no pod creates where not bound"),
        pytest.param("delete", "pods", ("-n", "kube-system"), id="no pod deletes in kube-system"),
        pytest.param("update", "nodes", (), id="no node update (a patch, narrowed by a policy)"),
        pytest.param("delete", "nodes", (), id="never deletes nodes"),
        pytest.param("list", "secrets", ("-A",), id="cannot list Secrets anywhere"),
        pytest.param("watch", "secrets", ("-n", "team-a"), id="cannot watch Secrets"),
        pytest.param("delete", "secrets", ("-n", "team-a"), id="never deletes Secrets"),
        pytest.param(
            "delete",
            "podgroups.scheduling.gang-extender.io",
            ("-n", "team-a"),
            id="never deletes PodGroups",
        ),
        pytest.param(
            "patch",
            "podgroups.scheduling.x-k8s.io",
            ("-n", "team-a"),
            id="never writes scheduler-plugins PodGroups",
        ),
        pytest.param(
            "patch",
            "mutatingwebhookconfigurations/someone-else",
            (),
            id="only its own webhook configuration",
        ),
        pytest.param(
            "update", "leases/gang-extender", ("-n", "gang-system"), id="not the scheduler's Lease"
        ),
        pytest.param(
            "update", "leases/kube-scheduler", ("-n", "kube-system"), id="no Lease elsewhere"
        ),
        pytest.param(
            "patch",
            "resourceclaims.resource.k8s.io",
            ("-n", "team-a"),
            id="never writes ResourceClaims",
        ),
        pytest.param(
            "update",
            "resourceclaims.resource.k8s.io",
            ("--subresource=status", "-n", "team-a"),
            id="never allocates devices",
        ),
        pytest.param("create", "resourceslices.resource.k8s.io", (), id="never publishes devices"),
        pytest.param("create", "clusterrolebindings", (), id="cannot grant itself more"),
        pytest.param("create", "rolebindings", ("-n", "team-b"), id="cannot opt a namespace in"),
        pytest.param("patch", "pods", ("-n", "kube-system"), id="no pod writes in kube-system"),
        pytest.param(
            "patch",
            "pods",
            ("--subresource=status", "-n", "kube-system"),
            id="no pod status writes in kube-system",
        ),
        pytest.param("get", "secrets", ("-n", "kube-system"), id="no Secrets in kube-system"),
        pytest.param(
            "patch", "configmaps", ("-n", "kube-system"), id="no ConfigMaps in kube-system"
        ),
        pytest.param("create", "services", ("-n", "kube-system"), id="no Services in kube-system"),
        pytest.param("patch", "pods", ("-n", "team-b"), id="no pod writes where not bound"),
        pytest.param("get", "secrets", ("-n", "team-b"), id="no Secrets where not bound"),
        pytest.param(
            "get", "secrets/other", ("-n", "gang-system"), id="only the CA Secret in gang-system"
        ),
    ],
)
def test_the_service_account_may_not_do_more(cluster, applied, verb, resource, flags) -> None:
    assert not can_i(cluster, SERVICE_SA, verb, resource, *flags)


@pytest.mark.parametrize(
    ("verb", "resource", "flags", "allowed"),
    [
        pytest.param("list", "pods", ("-A",), True, id="schedules pods"),
        pytest.param("list", "nodes", (), True, id="sees nodes"),
        pytest.param("list", "persistentvolumeclaims", ("-A",), True, id="volume binding"),
        pytest.param(
            "update", "leases/gang-extender", ("-n", "gang-system"), True, id="its own Lease"
        ),
        pytest.param(
            "get",
            "configmaps/extension-apiserver-authentication",
            ("-n", "kube-system"),
            True,
            id="authenticates /metrics callers",
        ),
        pytest.param(
            "update",
            "leases/gang-extender-service",
            ("-n", "gang-system"),
            False,
            id="not the service's Lease",
        ),
        pytest.param("get", "secrets", ("-n", "gang-system"), False, id="no Secrets"),
        pytest.param("delete", "nodes", (), False, id="never deletes nodes"),
    ],
)
def test_the_gang_scheduler_account(cluster, applied, verb, resource, flags, allowed) -> None:
    assert can_i(cluster, SCHEDULER_SA, verb, resource, *flags) is allowed


def test_the_scheduler_configmap_is_the_file_the_e2e_scheduler_runs(
    rendered, gang_stack: GangStack
) -> None:
    configmaps = [
        d
        for d in rendered
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gang-scheduler-config-")
    ]
    assert len(configmaps) == 1
    assert configmaps[0]["data"] == {"scheduler-config.yaml": SCHEDULER_CONFIG.read_text()}
    assert SCHEDULER_CONFIG == DEPLOY / "scheduler" / "scheduler-config.yaml"

    # The running e2e scheduler was started with that file, rewritten only for loopback.
    assert gang_stack.scheduler is not None
    config_arg = next(a for a in gang_stack.scheduler.argv if a.startswith("--config="))
    running = yaml.safe_load(Path(config_arg.removeprefix("--config=")).read_text())
    deployed = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    running["clientConnection"]["kubeconfig"] = deployed["clientConnection"]["kubeconfig"]
    for ours, theirs in zip(running["extenders"], deployed["extenders"], strict=True):
        ours["urlPrefix"] = theirs["urlPrefix"]
        for key in ("caFile", "certFile", "keyFile"):
            ours["tlsConfig"][key] = theirs["tlsConfig"][key]
    assert running == deployed

    # The Deployment runs it from the generated ConfigMap, and mounts the CA at its caFile.
    deployment = find(rendered, "Deployment", "gang-scheduler")
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    command = pod["containers"][0]["command"]
    config_path = next(a for a in command if a.startswith("--config=")).removeprefix("--config=")
    config_volume = next(n for n, path in mounts.items() if config_path.startswith(path + "/"))
    assert volumes[config_volume]["configMap"]["name"] == configmaps[0]["metadata"]["name"]
    ca_file = Path(deployed["extenders"][0]["tlsConfig"]["caFile"])
    ca_volume = next(n for n, path in mounts.items() if str(ca_file.parent) == path)
    assert volumes[ca_volume]["configMap"]["name"] == "gang-extender-ca"
    assert {"key": "ca.crt", "path": ca_file.name} in volumes[ca_volume]["configMap"]["items"]
    # ... and kube-scheduler's client certificate (mutual TLS) at its certFile/keyFile.
    tls_config = deployed["extenders"][0]["tlsConfig"]
    cert_file, key_file = Path(tls_config["certFile"]), Path(tls_config["keyFile"])
    client_volume = next(n for n, path in mounts.items() if str(cert_file.parent) == path)
    assert key_file.parent == cert_file.parent
    assert volumes[client_volume]["secret"]["secretName"] == "gang-extender-scheduler-client"
    assert {(i["key"], i["path"]) for i in volumes[client_volume]["secret"]["items"]} == {
        ("tls.crt", cert_file.name),
        ("tls.key", key_file.name),
    }


def test_the_service_publishes_the_ca_the_scheduler_mounts(cluster, gang_stack: GangStack) -> None:
    """ConfigMap gang-system/gang-extender-ca holds the CA the service serves under."""
    published = gang_stack.published_ca()
    assert published == gang_stack.ca_path.read_bytes()


def test_cert_manager_component_swaps_the_tls_source(cluster, tmp_path) -> None:
    """deploy/overlays/cert-manager added to deploy/, as docs/deploy.md shows."""
    relative = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [relative],
                "components": [f"{relative}/overlays/cert-manager"],
            }
        )
    )
    docs = render(cluster, tmp_path)
    service = find(docs, "Deployment", "gang-extender")["spec"]["template"]["spec"]
    args = service["containers"][0]["args"]
    assert "--leader-elect" in args
    assert any(a.startswith("--tls-cert=") for a in args) and any(
        a.startswith("--tls-key=") for a in args
    )
    assert {v["name"]: v for v in service["volumes"]}["certs"]["secret"][
        "secretName"
    ] == "gang-extender-tls"
    scheduler = find(docs, "Deployment", "gang-scheduler")["spec"]["template"]["spec"]
    ca_volume = {v["name"]: v for v in scheduler["volumes"]}["extender-ca"]
    assert "configMap" not in ca_volume and ca_volume["secret"]["secretName"] == "gang-extender-tls"
    webhook = find(docs, "MutatingWebhookConfiguration", "gang-extender")
    assert (
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == "gang-system/gang-extender-serving"
    )
    serving = find(docs, "Certificate", "gang-extender-serving")
    assert "gang-extender.gang-system.svc" in serving["spec"]["dnsNames"]
    # Mutual TLS: kube-scheduler's client cert from the same CA, the service trusting it.
    client = find(docs, "Certificate", "gang-scheduler-client")
    assert client["spec"]["secretName"] == "gang-extender-scheduler-client"
    assert client["spec"]["usages"][0] == "client auth"
    assert client["spec"]["issuerRef"] == serving["spec"]["issuerRef"]
    env = {e["name"]: e.get("value") for e in service["containers"][0].get("env", [])}
    assert env["GANG_EXTENDER_CLIENT_CA"] == "/etc/gang-extender/certs/ca.crt"
    assert {"POD_NAME", "GANG_LEASE_NAMESPACE"} <= set(env)  # merged, not replaced
    # Everything but cert-manager's own kinds is still valid for the API server.
    plain = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
    dry_run(cluster, plain)


def test_monitoring_renders(cluster) -> None:
    docs = render(cluster, DEPLOY / "monitoring")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    dashboard = find(docs, "ConfigMap", "gang-extender-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    # The Prometheus Operator CRDs are not on this cluster; the ConfigMap is plain.
    dry_run(cluster, [dashboard])


@pytest.mark.parametrize("name", ["gang-extender", "gang-scheduler"])
def test_the_pods_pass_the_restricted_pod_security_standard(
    cluster, rendered, applied, name
) -> None:
    """gang-system enforces `restricted`; a Pod of each Deployment's template is admitted."""
    namespace = find(rendered, "Namespace", "gang-system")
    kubectl(
        cluster, "apply", "-f", "-", stdin=dump([namespace])
    )  # its labels, whoever touched it since
    template = find(rendered, "Deployment", name)["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-psa-check",
            "namespace": "gang-system",
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }
    result = kubectl(
        cluster, "create", "--dry-run=server", "-f", "-", stdin=dump([pod]), check=False
    )
    assert result.returncode == 0, result.stderr
    assert "violate" not in result.stderr, result.stderr


FENCE_NODE = "e2e-fence-policy-node"
# Writes of the node lifecycle controller between our read and our patch (409s).
CONFLICT_RETRIES = 10


def patch_node_as_service(
    cluster: LocalCluster, patch: dict[str, Any], *flags: str
) -> subprocess.CompletedProcess[str]:
    return kubectl(
        cluster,
        "patch",
        "node",
        FENCE_NODE,
        f"--as={SERVICE_SA}",
        "--type=merge",
        "-p",
        json.dumps(patch),
        *flags,
        check=False,
    )


@pytest.fixture
def fence_node(cluster: LocalCluster, applied) -> Iterator[None]:
    """A Node object to patch (no kubelet or KWOK needs to run it), deleted afterwards."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": FENCE_NODE, "labels": {"pool": "e2e-fence"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    }
    kubectl(cluster, "apply", "-f", "-", stdin=dump([node]))
    yield
    kubectl(cluster, "delete", "node", FENCE_NODE, "--wait=false", check=False)


def test_the_service_account_may_put_and_take_the_fence_taint_and_nothing_else_on_a_node(
    cluster, fence_node
) -> None:
    """ValidatingAdmissionPolicy gang-extender-node-fence narrows the node patch RBAC
    grants to the reservation fence taint (docs/deploy.md#rbac)."""
    fence = {"key": "gang-extender.io/reserved", "value": "team-a.big", "effect": "NoSchedule"}

    def node() -> dict[str, Any]:
        return json.loads(kubectl(cluster, "get", "node", FENCE_NODE, "-o", "json").stdout)

    def others(current: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The node's taints but the fence (the node controller may add its own)."""
        taints = (current or node())["spec"].get("taints") or []
        return [t for t in taints if t["key"] != fence["key"]]

    def label_denied() -> str:
        result = patch_node_as_service(cluster, {"metadata": {"labels": {"pool": "stolen"}}})
        if result.returncode == 0:  # the policy is not loaded yet: undo, ask again
            kubectl(cluster, "label", "node", FENCE_NODE, "pool=e2e-fence", "--overwrite")
            return ""
        return result.stderr

    # The policy takes effect once the API server has loaded it.
    denied = wait_until(label_denied, what="the node fence policy to deny a label change")
    assert "may not change a node's labels or annotations" in denied

    def patch_taints(extra: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
        """The node's other taints plus `extra`, at the resourceVersion they were read at.

        The node lifecycle controller taints a node no kubelet runs (not-ready, then
        unreachable): a patch of the list read before its change would take that taint
        off, which the policy rightly denies. With the resourceVersion the API server
        answers 409 instead, and the list is read again."""
        for _ in range(CONFLICT_RETRIES):
            current = node()
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"taints": [*others(current), *extra]},
            }
            result = patch_node_as_service(cluster, patch, "-o", "json")
            if result.returncode == 0 or "the object has been modified" not in result.stderr:
                return result
        return result

    put = patch_taints([fence])
    assert put.returncode == 0, put.stderr
    # The node as the patch wrote it: the session's service, if running, takes a fence
    # no reservation of its own explains off soon after, so a later read may miss it.
    assert fence in json.loads(put.stdout)["spec"]["taints"]
    taken = patch_taints([])
    assert taken.returncode == 0, taken.stderr
    assert fence not in (node()["spec"].get("taints") or [])

    for patch, message in [
        (
            {"spec": {"taints": [t for t in others() if t["key"] != "nvidia.com/gpu"]}},
            "may change no taint of a node but gang-extender.io/reserved",
        ),
        (
            {"spec": {"taints": [*others(), {**fence, "effect": "NoExecute"}]}},
            "the gang-extender.io/reserved taint is NoSchedule only",
        ),
        ({"spec": {"unschedulable": True}}, "may not cordon a node"),
        (
            {"metadata": {"annotations": {"x": "y"}}},
            "may not change a node's labels or annotations",
        ),
        # Issue 30: an owner would let the garbage collector delete the node with it; a
        # finalizer would keep it from ever being deleted.
        (
            {
                "metadata": {
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Namespace",
                            "name": "kube-system",
                            "uid": "00000000-0000-0000-0000-000000000001",
                        }
                    ]
                }
            },
            "may not change a node's ownerReferences or finalizers",
        ),
        (
            {"metadata": {"finalizers": ["example.com/hold"]}},
            "may not change a node's ownerReferences or finalizers",
        ),
    ]:
        result = patch_node_as_service(cluster, patch)
        assert result.returncode != 0 and message in result.stderr, (patch, result.stderr)
    after = node()
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in after["spec"][
        "taints"
    ]
    assert after["metadata"]["labels"]["pool"] == "e2e-fence"
    assert not after["spec"].get("unschedulable")
    assert not after["metadata"].get("ownerReferences")
    assert not after["metadata"].get("finalizers")
