"""charts/gang-extender: `helm template` is `kubectl kustomize deploy/`, and it installs.

helm is built from its Go module by hack/build-helm.sh (cached, like the control
plane); these tests skip only when that cannot happen because Go is missing.

1. Equal objects: the chart with default values (and with tls.certManager /
   monitoring enabled) renders the same objects as deploy/ (with the cert-manager
   Component / deploy/monitoring), field by field, once the differences that are
   the point of a chart are normalised away (normalise() below, and
   docs/deploy.md#helm). A change to deploy/ the chart does not follow fails here
   with the object and a diff.
2. `helm lint`, and every settings.* value reaching the service as its GANG_*
   variable, parsed back by Settings.
3. Installs: the rendered chart passes a server-side dry run on the session's API
   server; on a control plane of its own, `helm install`, `helm upgrade` and
   `helm uninstall` run for real, as docs/deploy.md shows them.
"""

from __future__ import annotations

import base64
import copy
import difflib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.config import Settings
from extender.devcluster.cluster import LocalCluster
from tests.unit.test_chart_values import AS_FLAGS, values_key

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gang-extender"
DEPLOY = REPO / "deploy"
BUILD_HELM = REPO / "hack" / "build-helm.sh"
NAMESPACE = "gang-system"
RELEASE = "gang-extender"

# What a chart adds or does differently, by design (docs/deploy.md#helm):
HELM_LABELS = (
    # Helm's own labels on every templated object, and kustomize's commonLabel
    # part-of (the chart has it too, but not on the CRD: crds/ is never templated,
    # and deploy/'s cert-manager Component and monitoring/ do not add it).
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
)
# kustomize rolls the gang scheduler by a content hash in its ConfigMap's name
# (gang-scheduler-config-<hash>); the chart names it gang-scheduler-config and
# rolls it by a checksum/config annotation on the pod template.
SCHEDULER_CONFIG = "gang-scheduler-config"
CHECKSUM_ANNOTATION = "checksum/config"


# ---------------------------------------------------------------- tools


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm at the pinned version: hack/build-helm.sh (a no-op once cached)."""
    # Build progress (the first time: minutes) goes to our stderr, as for the control plane.
    result = subprocess.run(
        ["bash", str(BUILD_HELM)], stdout=subprocess.PIPE, text=True, timeout=3600
    )
    if result.returncode != 0:
        if shutil.which("go") is None:
            pytest.skip("go is not installed: hack/build-helm.sh builds helm from its Go module")
        pytest.fail("hack/build-helm.sh failed: its output is in this test's captured stderr")
    return Path(result.stdout.strip().splitlines()[-1])


def run(*argv: str | Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=300, env=env
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, argv))} failed ({result.returncode}):\n{result.stderr}\n{result.stdout}"
        )
    return result.stdout


def docs_of(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def helm_template(
    helm: Path, *sets: str, namespace: str = NAMESPACE, tests: bool = False
) -> list[dict[str, Any]]:
    """The rendered chart; `tests`: with the `helm test` hook pod (not part of an install)."""
    args = [a for s in sets for a in ("--set", s)]
    if not tests:
        args.append("--skip-tests")
    out = run(helm, "template", RELEASE, CHART, "--namespace", namespace, "--include-crds", *args)
    return docs_of(out)


def kustomize(bin_dir: Path, directory: Path) -> list[dict[str, Any]]:
    return docs_of(run(bin_dir / "kubectl", "kustomize", directory))


def with_cert_manager(tmp_path: Path) -> Path:
    """deploy/ plus its cert-manager Component, as docs/deploy.md#tls composes them."""
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
    return tmp_path


# ---------------------------------------------------------------- comparison


Key = tuple[str, str, str]


def key(doc: dict[str, Any]) -> Key:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def normalise(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` without the differences a chart has by design (module docstring)."""
    doc = copy.deepcopy(doc)
    meta = doc["metadata"]
    for label in HELM_LABELS:
        meta.get("labels", {}).pop(label, None)
    if meta.get("labels") == {}:
        del meta["labels"]
    if doc["kind"] == "ConfigMap" and meta["name"].startswith(SCHEDULER_CONFIG + "-"):
        meta["name"] = SCHEDULER_CONFIG
    # The webhook's CEL, a folded YAML scalar with more-indented lines: kustomize's
    # YAML library keeps an extra line break there. Whitespace means nothing to CEL.
    for webhook in doc.get("webhooks", []):
        for condition in webhook.get("matchConditions", []):
            condition["expression"] = " ".join(condition["expression"].split())
    if doc["kind"] == "Deployment":
        template = doc["spec"]["template"]
        annotations = template["metadata"].get("annotations", {})
        annotations.pop(CHECKSUM_ANNOTATION, None)
        if "annotations" in template["metadata"] and not annotations:
            del template["metadata"]["annotations"]
        # Where a kustomize patch adds a volume (cert-manager), the merge puts it
        # first; the order of volumes and mounts means nothing, so compare them by name.
        pod = template["spec"]
        pod["volumes"] = sorted(pod.get("volumes", []), key=lambda v: v["name"])
        for container in pod["containers"]:
            container["volumeMounts"] = sorted(
                container.get("volumeMounts", []), key=lambda m: m["name"]
            )
        for volume in pod["volumes"]:
            config = volume.get("configMap", {})
            if config.get("name", "").startswith(SCHEDULER_CONFIG + "-"):
                config["name"] = SCHEDULER_CONFIG
    return doc


def differences(kustomized: list[dict[str, Any]], charted: list[dict[str, Any]]) -> list[str]:
    """What differs, object by object, as text a reader can act on (empty: equal)."""
    ours = {key(n): n for n in map(normalise, kustomized)}
    theirs = {key(n): n for n in map(normalise, charted)}
    problems = [f"only in deploy/: {k}" for k in sorted(ours.keys() - theirs.keys())]
    problems += [f"only in the chart: {k}" for k in sorted(theirs.keys() - ours.keys())]
    for k in sorted(ours.keys() & theirs.keys()):
        if ours[k] != theirs[k]:
            diff = difflib.unified_diff(
                yaml.safe_dump(ours[k], sort_keys=True).splitlines(),
                yaml.safe_dump(theirs[k], sort_keys=True).splitlines(),
                "kubectl kustomize deploy/",
                "helm template charts/gang-extender",
                lineterm="",
            )
            problems.append(f"{k} differs:\n" + "\n".join(diff))
    return problems


def assert_same(kustomized: list[dict[str, Any]], charted: list[dict[str, Any]]) -> None:
    problems = differences(kustomized, charted)
    assert not problems, (
        "charts/gang-extender no longer renders what deploy/ applies; change the chart's "
        "template beside the deploy/ file (same relative path under templates/):\n\n"
        + "\n\n".join(problems)
    )


def test_the_chart_renders_what_deploy_applies(bin_dir: Path, helm: Path) -> None:
    assert_same(kustomize(bin_dir, DEPLOY), helm_template(helm, "namespace.create=true"))


def test_with_cert_manager_the_chart_renders_what_the_component_adds(
    bin_dir: Path, helm: Path, tmp_path: Path
) -> None:
    assert_same(
        kustomize(bin_dir, with_cert_manager(tmp_path)),
        helm_template(helm, "namespace.create=true", "tls.certManager.enabled=true"),
    )


def test_in_wiring_only_mode_the_chart_renders_what_the_component_leaves(
    bin_dir: Path, helm: Path, tmp_path: Path
) -> None:
    """deploy/ plus Component overlays/wiring-only, as docs/deploy.md#modes composes them."""
    relative = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [relative],
                "components": [f"{relative}/overlays/wiring-only"],
            }
        )
    )
    kustomized = kustomize(bin_dir, tmp_path)
    assert not [d for d in kustomized if d["metadata"]["name"].startswith("gang-scheduler")]
    assert_same(
        kustomized, helm_template(helm, "namespace.create=true", "settings.mode=wiring-only")
    )


def test_with_monitoring_the_chart_adds_what_deploy_monitoring_applies(
    bin_dir: Path, helm: Path
) -> None:
    plain = {key(d) for d in helm_template(helm)}
    monitored = [d for d in helm_template(helm, "monitoring.enabled=true") if key(d) not in plain]
    assert_same(kustomize(bin_dir, DEPLOY / "monitoring"), monitored)


def test_the_differences_are_only_the_documented_ones(bin_dir: Path, helm: Path) -> None:
    """What normalise() hides is what docs/deploy.md#helm lists, and nothing else slips in."""
    kustomized = {key(d): d for d in kustomize(bin_dir, DEPLOY)}
    charted = {key(d): d for d in helm_template(helm, "namespace.create=true")}
    (hashed,) = [k for k in kustomized if k[2].startswith(SCHEDULER_CONFIG + "-")]
    assert (hashed[0], hashed[1], SCHEDULER_CONFIG) in charted
    scheduler = charted[("Deployment", NAMESPACE, "gang-scheduler")]["spec"]["template"]
    assert re.fullmatch(r"[0-9a-f]{64}", scheduler["metadata"]["annotations"][CHECKSUM_ANNOTATION])
    for k, doc in charted.items():
        labels = doc["metadata"].get("labels", {})
        if doc["kind"] == "CustomResourceDefinition":
            assert not set(HELM_LABELS) & set(labels), "crds/ is copied, not templated"
            continue
        assert labels["app.kubernetes.io/managed-by"] == "Helm", k
        assert labels["app.kubernetes.io/part-of"] == "gang-extender", k
    doc = (REPO / "docs" / "deploy.md").read_text()
    helm_section = doc[doc.index("## Helm") :]
    for mentioned in (
        "helm.sh/chart",
        SCHEDULER_CONFIG,
        CHECKSUM_ANNOTATION,
        "crds/",
        "--create-namespace",
    ):
        assert mentioned in helm_section, f"docs/deploy.md#helm does not mention {mentioned}"
    # Without namespace.create, no Namespace: `helm install --create-namespace` makes it.
    assert "Namespace" not in {d["kind"] for d in helm_template(helm)}


def test_helm_lint_passes(helm: Path) -> None:
    out = run(helm, "lint", "--strict", CHART)
    assert "0 chart(s) failed" in out
    run(
        helm,
        "lint",
        "--strict",
        CHART,
        "--set",
        "tls.certManager.enabled=true,monitoring.enabled=true",
    )


# ---------------------------------------------------------------- values -> settings


def _sample(field: str) -> tuple[str, Any]:
    """A --set-json value for a setting (not its default) and the value Settings reads back."""
    default = Settings.model_fields[field].get_default(call_default_factory=True)
    if field == "log_level":
        return '"debug"', "DEBUG"
    if field == "mode":
        return '"wiring-only"', "wiring-only"
    if field == "accelerator_resources":
        return '"amd.com/gpu,nvidia.com/mig-*"', "amd.com/gpu,nvidia.com/mig-*"
    if isinstance(default, list):  # tls_hosts, extender_client_names, webhook_client_names
        return '["a.example", "10.0.0.1"]', ["a.example", "10.0.0.1"]
    if isinstance(default, bool):
        return "true", True
    if isinstance(default, int) and "port" in field:
        return str(default + 1), default + 1
    if isinstance(default, int):
        return str(default * 2), default * 2
    if isinstance(default, float):
        return str(default * 2.5), default * 2.5
    return f'"/x/{field}"', f"/x/{field}"  # paths and names


def test_every_setting_reaches_the_service_as_its_env_variable_or_flag(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = {field: _sample(field) for field in Settings.model_fields}
    sets = [
        a
        for f, (raw, _) in samples.items()
        for a in ("--set-json", f"settings.{values_key(f)}={raw}")
    ]
    out = run(helm, "template", RELEASE, CHART, "--namespace", NAMESPACE, *sets)
    (deployment,) = [
        d
        for d in docs_of(out)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "gang-extender"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert set(env) == {"POD_NAME"} | {
        f"GANG_{f.upper()}" for f in Settings.model_fields if f not in AS_FLAGS
    }
    # The service reads them back as the values set (flags: as `serve` parses them).
    for name in [n for n in os.environ if n.startswith("GANG_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("GANG_"):
            monkeypatch.setenv(name, value)
    assert container["args"] == ["--leader-elect", f"--tls-dir={samples['tls_dir'][1]}"]
    read = Settings(leader_elect=True, tls_dir=samples["tls_dir"][1])
    for field, (_, expected) in samples.items():
        got = getattr(read, field)
        assert (str(got) if isinstance(got, Path) else got) == expected, field
    # The ports the service listens on are the ports the pod declares.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "extender": read.extender_port,
        "webhook": read.webhook_port,
        "metrics": read.metrics_port,
    }


def test_in_another_namespace_everything_follows_it(helm: Path) -> None:
    docs = helm_template(helm, "namespace.create=true", namespace="gpu-sched")
    for doc in docs:
        meta = doc["metadata"]
        if "namespace" in meta and meta["name"] != "gang-scheduler-authentication-reader":
            assert meta["namespace"] == "gpu-sched", key(doc)
    text = yaml.safe_dump_all(docs)
    assert "gang-system" not in text
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == SCHEDULER_CONFIG
    ]
    scheduler = yaml.safe_load(config["data"]["scheduler-config.yaml"])
    assert scheduler["extenders"][0]["urlPrefix"] == "https://gang-extender.gpu-sched.svc:8443"
    assert scheduler["leaderElection"]["resourceNamespace"] == "gpu-sched"
    (service,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gang-extender"
    ]
    env = {
        e["name"]: e.get("value")
        for e in service["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    # The self-managed cert covers the Service in this namespace, as the default covers gang-system's.
    hosts = yaml.safe_load(env["GANG_TLS_HOSTS"])
    assert hosts == [h.replace("gang-system", "gpu-sched") for h in Settings().tls_hosts]


def webhook_names_and_grants(docs: list[dict[str, Any]]) -> tuple[list[str], list[str], str]:
    """(MutatingWebhookConfiguration names, what ClusterRole gang-extender may patch of
    them, the name the service is told to patch)."""
    objects = [d["metadata"]["name"] for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (role,) = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gang-extender"
    ]
    granted = [
        name
        for rule in role["rules"]
        if "mutatingwebhookconfigurations" in rule["resources"]
        and {"get", "patch"} <= set(rule["verbs"])
        for name in rule.get("resourceNames", [])
    ]
    (service,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gang-extender"
    ]
    env = {
        e["name"]: e.get("value")
        for e in service["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    told = env.get("GANG_WEBHOOK_CONFIG_NAME", Settings().webhook_config_name) or ""
    return objects, granted, told


def test_a_webhook_configuration_name_renames_the_object_and_its_rbac(helm: Path) -> None:
    """Issue 30: settings.webhookConfigName renamed only what the service patches, so it
    patched an object that did not exist, with no right to, and was never Ready."""
    assert webhook_names_and_grants(helm_template(helm)) == (
        ["gang-extender"],
        ["gang-extender"],
        "gang-extender",
    )
    assert webhook_names_and_grants(
        helm_template(helm, "settings.webhookConfigName=gpu-wiring")
    ) == (
        ["gpu-wiring"],
        ["gpu-wiring"],
        "gpu-wiring",
    )
    # "": the service leaves the configuration alone, and may not touch it.
    objects, granted, told = webhook_names_and_grants(
        helm_template(helm, "settings.webhookConfigName=")
    )
    assert (objects, granted, told) == (["gang-extender"], [], "")


# ---------------------------------------------------------------- installs


def test_the_rendered_chart_passes_a_server_side_dry_run(cluster: LocalCluster, helm: Path) -> None:
    from tests.e2e.test_deploy import dry_run, dump, kubectl

    docs = helm_template(helm, "namespace.create=true", tests=True)
    # `helm test`'s pod (templates/tests/answers.yaml) is accepted too, under restricted.
    assert ("Pod", NAMESPACE, "gang-extender-test-answers") in {key(d) for d in docs}
    definitions = [d for d in docs if d["kind"] in ("Namespace", "CustomResourceDefinition")]
    kubectl(cluster, "apply", "-f", "-", stdin=dump(definitions))
    kubectl(
        cluster,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podgroups.scheduling.gang-extender.io",
    )
    output = dry_run(cluster, docs)
    for doc in docs:
        assert doc["metadata"]["name"] in output, f"{key(doc)} not in:\n{output}"


def test_placement_values_reach_both_deployments_and_are_accepted(
    cluster: LocalCluster, helm: Path
) -> None:
    """priorityClassName, imagePullSecrets, nodeSelector, tolerations: none in deploy/."""
    from tests.e2e.test_deploy import dry_run, dump, kubectl

    namespace = [
        d for d in helm_template(helm, "namespace.create=true") if d["kind"] == "Namespace"
    ]
    kubectl(cluster, "apply", "-f", "-", stdin=dump(namespace))
    placement = {
        "priorityClassName": '"system-cluster-critical"',
        "imagePullSecrets": '[{"name": "registry"}]',
        "nodeSelector": '{"node-role.kubernetes.io/control-plane": ""}',
        "tolerations": '[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]',
    }
    sets = [
        a
        for prefix in ("", "scheduler.")
        for field, raw in placement.items()
        for a in ("--set-json", f"{prefix}{field}={raw}")
    ]
    out = run(helm, "template", RELEASE, CHART, "--namespace", NAMESPACE, *sets)
    deployments = [d for d in docs_of(out) if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"gang-extender", "gang-scheduler"}
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "system-cluster-critical"
        assert pod["imagePullSecrets"] == [{"name": "registry"}]
        assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
        assert pod["tolerations"][0]["effect"] == "NoSchedule"
    dry_run(cluster, deployments)


@pytest.fixture(scope="module")
def own_cluster(bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of its own: the session's has deploy/'s RBAC and the e2e webhook,
    which `helm install` would rightly refuse to take over."""
    local = LocalCluster(tmp_path_factory.mktemp("helm-cluster"), bin_dir)
    local.start()
    try:
        yield local
    finally:
        local.stop()


def test_helm_install_upgrade_uninstall(own_cluster: LocalCluster, helm: Path) -> None:
    env = {
        **os.environ,
        "KUBECONFIG": str(own_cluster.kubeconfig),
        "HOME": str(own_cluster.workdir),
    }
    kubectl = [own_cluster.bin_dir / "kubectl"]
    chart_args = [RELEASE, CHART, "--namespace", NAMESPACE]

    # As docs/deploy.md#helm: the namespace from helm, labelled restricted by you;
    # a namespace where gangs run, given its RoleBinding by namespaceBindings.
    run(*kubectl, "create", "namespace", "team-a", env=env)
    run(
        helm,
        "install",
        *chart_args,
        "--create-namespace",
        "--wait=false",
        "--set",
        "namespaceBindings={team-a}",
        env=env,
    )
    run(
        *kubectl,
        "label",
        "namespace",
        NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
        env=env,
    )
    status = run(helm, "status", RELEASE, "--namespace", NAMESPACE, env=env)
    assert "STATUS: deployed" in status
    assert "kubectl label namespace <your-namespace> gang-extender.io/inject=enabled" in status
    objects = run(
        *kubectl,
        "-n",
        NAMESPACE,
        "get",
        "deploy,svc,pdb,networkpolicy,sa,cm,role,rolebinding",
        "-o",
        "name",
        env=env,
    )
    for expected in (
        "deployment.apps/gang-extender",
        "deployment.apps/gang-scheduler",
        "service/gang-extender",
        "service/gang-extender-metrics",
        "poddisruptionbudget.policy/gang-extender",
        "networkpolicy.networking.k8s.io/gang-extender",
        f"configmap/{SCHEDULER_CONFIG}",
    ):
        assert expected in objects.split(), f"{expected} not installed:\n{objects}"
    run(
        *kubectl,
        "get",
        "crd/podgroups.scheduling.gang-extender.io",
        "mutatingwebhookconfiguration/gang-extender",
        "clusterrole/gang-extender",
        env=env,
    )

    # ClusterRole gang-extender-namespace holds in team-a and nowhere else.
    service_account = f"--as=system:serviceaccount:{NAMESPACE}:gang-extender"
    for namespace, answer in (("team-a", "yes"), ("default", "no"), ("kube-system", "no")):
        can = subprocess.run(
            [
                *map(str, kubectl),
                "auth",
                "can-i",
                "patch",
                "pods",
                "-n",
                namespace,
                service_account,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert can.stdout.strip() == answer, (namespace, can.stdout, can.stderr)

    # What the service writes at start-up (extender.kube.webhook_config): caBundle and
    # its secret path. No service runs here, so write them as it would.
    config = json.loads(
        run(*kubectl, "get", "mutatingwebhookconfiguration/gang-extender", "-o", "json", env=env)
    )
    bundle = base64.b64encode(b"not a real CA").decode()
    written = [
        op
        for position, _ in enumerate(config["webhooks"])
        for op in (
            {"op": "add", "path": f"/webhooks/{position}/clientConfig/caBundle", "value": bundle},
            {
                "op": "add",
                "path": f"/webhooks/{position}/clientConfig/service/path",
                "value": "/mutate/token",
            },
        )
    ]
    run(
        *kubectl,
        "patch",
        "mutatingwebhookconfiguration/gang-extender",
        "--type=json",
        "-p",
        json.dumps(written),
        env=env,
    )

    # An upgrade with a setting: the service's env follows.
    run(
        helm,
        "upgrade",
        *chart_args,
        "--set",
        "settings.logLevel=DEBUG",
        "--set",
        "image.tag=0.1.0",
        env=env,
    )
    deployment = yaml.safe_load(
        run(*kubectl, "-n", NAMESPACE, "get", "deploy/gang-extender", "-o", "yaml", env=env)
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "GANG_LOG_LEVEL", "value": "DEBUG"} in container["env"]
    assert container["image"] == "gang-extender:0.1.0"
    assert "REVISION: 2" in run(helm, "status", RELEASE, "--namespace", NAMESPACE, env=env)
    # ... and the gang scheduler, whose config did not change, is not rolled.
    scheduler = yaml.safe_load(
        run(*kubectl, "-n", NAMESPACE, "get", "deploy/gang-scheduler", "-o", "yaml", env=env)
    )
    assert scheduler["metadata"]["generation"] == 1
    # ... and what the service wrote into the webhook configuration is kept: the chart,
    # like deploy/, sets no caBundle and no path in either entry.
    config = json.loads(
        run(*kubectl, "get", "mutatingwebhookconfiguration/gang-extender", "-o", "json", env=env)
    )
    clients = {w["name"]: w["clientConfig"] for w in config["webhooks"]}
    assert {name: c.get("caBundle") for name, c in clients.items()} == {
        "pods.gang-extender.io": bundle,
        "gpu-routing.gang-extender.io": bundle,
    }
    assert clients["pods.gang-extender.io"]["service"]["path"] == "/mutate/token"
    assert clients["gpu-routing.gang-extender.io"]["service"]["path"] == "/mutate/token"

    # Uninstall removes everything but the CRD (helm never deletes crds/), as documented.
    run(helm, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", env=env)
    left = run(
        *kubectl, "-n", NAMESPACE, "get", "deploy,svc,pdb,sa,role", "-o", "name", env=env
    ).split()
    assert [name for name in left if "gang-" in name] == []
    cluster_wide = run(
        *kubectl, "get", "clusterrole,mutatingwebhookconfiguration,crd", "-o", "name", env=env
    ).split()
    assert (
        "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.gang-extender.io"
        in cluster_wide
    )
    assert "clusterrole.rbac.authorization.k8s.io/gang-extender" not in cluster_wide
    assert (
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/gang-extender"
        not in cluster_wide
    )
