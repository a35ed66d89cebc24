"""charts/gang-extender read as files: its values mirror Settings, its copies of
deploy/ files are the files themselves, its version is the package's.

The chart rendered by helm, compared with `kubectl kustomize deploy/` and installed
on a real API server: tests/e2e/test_chart.py.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.config import Settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gang-extender"
DEPLOY = REPO / "deploy"
# Settings deploy/ (and so the chart) passes as flags, not GANG_* variables.
AS_FLAGS = {"leader_elect": "--leader-elect", "tls_dir": "--tls-dir"}


def values_key(field: str) -> str:
    """settings.<key> of a Settings field: bind_barrier_timeout_seconds -> bindBarrierTimeoutSeconds."""
    first, *rest = field.split("_")
    return first + "".join(word.title() for word in rest)


def values() -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_every_setting_has_a_values_key_and_no_key_is_not_a_setting() -> None:
    keys = set(values()["settings"])
    wanted = {values_key(field) for field in Settings.model_fields}
    assert not wanted - keys, (
        f"add to charts/gang-extender/values.yaml settings: {sorted(wanted - keys)}"
    )
    assert not keys - wanted, (
        f"values.yaml settings that are not Settings fields: {sorted(keys - wanted)}"
    )


def test_the_keys_map_back_to_their_env_variables() -> None:
    """The chart's template turns a key into GANG_<key | snakecase | upper>: check the round trip."""
    for field in Settings.model_fields:
        key = values_key(field)
        snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()
        assert snake == field, f"{key} does not map back to {field}"


def test_settings_are_unset_except_the_two_deploy_passes_as_flags() -> None:
    """null = the service's own default; what deploy/ sets, the chart sets the same way."""
    settings = values()["settings"]
    set_ = {key: value for key, value in settings.items() if value is not None}
    assert set_ == {"leaderElect": True, "tlsDir": "/var/run/gang-extender/tls"}
    deployment = yaml.safe_load((DEPLOY / "service" / "deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--leader-elect", f"--tls-dir={set_['tlsDir']}"]
    assert set(AS_FLAGS.values()) == {a.split("=")[0] for a in args}


def test_the_settings_env_helper_skips_exactly_the_flags_and_the_lease_namespace() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    skipped = re.search(r'has \$key \(list ((?:"\w+" ?)+)\)', helpers)
    assert skipped is not None
    assert set(re.findall(r'"(\w+)"', skipped.group(1))) == {
        values_key(f) for f in (*AS_FLAGS, "lease_namespace")
    }


@pytest.mark.parametrize(
    ("copy", "original"),
    [
        (
            "crds/podgroups.scheduling.gang-extender.io.yaml",
            "crds/podgroups.scheduling.gang-extender.io.yaml",
        ),
        ("files/scheduler-config.yaml", "scheduler/scheduler-config.yaml"),
        ("files/prometheusrule.yaml", "monitoring/prometheusrule.yaml"),
        ("files/grafana-dashboard.json", "monitoring/grafana-dashboard.json"),
    ],
)
def test_the_chart_carries_deploy_files_unchanged(copy: str, original: str) -> None:
    """Helm reads only files inside the chart: these are copies, kept byte for byte."""
    assert (CHART / copy).read_bytes() == (DEPLOY / original).read_bytes(), (
        f"deploy/{original} changed: cp deploy/{original} charts/gang-extender/{copy}"
    )


def test_the_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["name"] == "gang-extender"
    assert chart["version"] == chart["appVersion"] == project["version"]


def test_the_scheduler_image_is_deploys() -> None:
    """deploy/ pins it to the control plane the tests run (tests/unit/test_manifests.py)."""
    deployment = yaml.safe_load((DEPLOY / "scheduler" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert values()["scheduler"]["image"] == container["image"], (
        "set scheduler.image in charts/gang-extender/values.yaml to deploy/'s"
    )


# deploy/ files the chart folds into other templates or carries in crds/ or files/.
NOT_A_TEMPLATE = {
    "crds/podgroups.scheduling.gang-extender.io.yaml": "crds/ (copied)",
    "crds/optional/podgroups.scheduling.x-k8s.io.yaml": "not installed by deploy/ either",
    "crds/optional/podgroups.scheduling.volcano.sh.yaml": "not installed by deploy/ either",
    "scheduler/scheduler-config.yaml": "files/, rendered by templates/scheduler/configmap.yaml",
    "overlays/cert-manager/service-tls.yaml": "templates/service/deployment.yaml (tls.certManager)",
    "overlays/cert-manager/scheduler-ca.yaml": "templates/scheduler/deployment.yaml (tls.certManager)",
    "overlays/cert-manager/webhook-ca.yaml": "templates/webhook.yaml (tls.certManager)",
    "overlays/wiring-only/without-scheduler.yaml": "templates/scheduler/ (settings.mode)",
}


def _template_for(relative: str) -> Path:
    return CHART / "templates" / relative.removeprefix("overlays/")


def test_every_deploy_manifest_has_its_template_at_the_same_path() -> None:
    """The chart's templates mirror deploy/ file by file, so a change has one obvious twin."""
    manifests = [
        str(p.relative_to(DEPLOY))
        for p in sorted(DEPLOY.rglob("*.yaml"))
        if p.name != "kustomization.yaml"
    ]
    missing = [
        f"deploy/{m} -> charts/gang-extender/templates/{m.removeprefix('overlays/')}"
        for m in manifests
        if m not in NOT_A_TEMPLATE and not _template_for(m).exists()
    ]
    assert not missing, "no template for:\n" + "\n".join(missing)
    assert set(NOT_A_TEMPLATE) <= set(manifests), "NOT_A_TEMPLATE names files deploy/ no longer has"


def _cluster_role_rules(path: Path) -> list[dict[str, Any]]:
    """The rules of the gang-extender ClusterRole in a file; Helm's template lines
    (labels) left out."""
    # The webhook configuration's name helper renders the service's default name.
    source = path.read_text().replace(WEBHOOK_CONFIG_NAME_HELPER, "gang-extender")
    text = "\n".join(line for line in source.splitlines() if "{{" not in line)
    (role,) = [
        d
        for d in yaml.safe_load_all(text)
        if d and d.get("kind") == "ClusterRole" and d["metadata"]["name"] == "gang-extender"
    ]
    rules = role["rules"]
    assert isinstance(rules, list)
    return rules


WEBHOOK_CONFIG_NAME_HELPER = '{{ include "gang-extender.webhookConfigName" . }}'


def test_the_webhook_configuration_and_its_rbac_follow_one_name() -> None:
    """Issue 30: settings.webhookConfigName renamed what the service patches, but not the
    object nor ClusterRole gang-extender's resourceNames (never Ready). Rendered with a
    name: tests/e2e/test_chart.py."""
    webhook = (CHART / "templates" / "webhook.yaml").read_text()
    role = (CHART / "templates" / "rbac" / "cluster-role.yaml").read_text()
    assert f"name: {WEBHOOK_CONFIG_NAME_HELPER}" in webhook
    assert f"resourceNames: [{WEBHOOK_CONFIG_NAME_HELPER}]" in role
    assert "resourceNames: [gang-extender]" not in role
    assert Settings().webhook_config_name == "gang-extender", "the helper's default"


def _grants(rules: list[dict[str, Any]], api_group: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for rule in rules:
        if api_group in rule.get("apiGroups", []):
            for resource in rule["resources"]:
                found.setdefault(resource, set()).update(rule["verbs"])
    return found


def test_other_schedulers_podgroups_are_granted_what_the_status_writer_does_and_no_more() -> None:
    """controller/foreign_status.py: scheduler-plugins' status through its subresource;
    Volcano's with the object (its CRD has no status subresource), a patch of status only.
    The chart grants the same as deploy/."""
    deploy = _cluster_role_rules(DEPLOY / "rbac" / "cluster-role.yaml")
    chart = _cluster_role_rules(CHART / "templates" / "rbac" / "cluster-role.yaml")
    assert deploy == chart
    assert _grants(deploy, "scheduling.x-k8s.io") == {
        "podgroups": {"list", "watch"},
        "podgroups/status": {"patch"},
    }
    assert _grants(deploy, "scheduling.volcano.sh") == {"podgroups": {"list", "watch", "patch"}}
