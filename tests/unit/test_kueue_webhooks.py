"""Which of Kueue's webhooks the local runner keeps (extender/devcluster/kueue.py)."""

from __future__ import annotations

import pytest
import yaml

from extender.devcluster.kueue import KueueManager, webhook_configurations


def hook(name: str, path: str) -> dict[str, object]:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "path": path}},
        "failurePolicy": "Fail",
    }


MANIFESTS = yaml.safe_dump(
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            hook("mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue"),
            hook("mjob.kb.io", "/mutate-batch-v1-job"),
            hook("mpod.kb.io", "/mutate--v1-pod"),
            hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset"),
        ],
    }
)


@pytest.mark.parametrize(
    ("frameworks", "kept"),
    [
        pytest.param(("batch/job",), ["mclusterqueue.kb.io", "mjob.kb.io"], id="Jobs"),
        pytest.param(
            ("batch/job", "pod"),
            ["mclusterqueue.kb.io", "mjob.kb.io", "mpod.kb.io"],
            id="Jobs and plain pods",
        ),
    ],
)
def test_kueues_own_and_the_enabled_frameworks_webhooks_are_kept(
    frameworks: tuple[str, ...], kept: list[str]
) -> None:
    (config,) = webhook_configurations(
        MANIFESTS, "https://127.0.0.1:1", "Q0E=", {"team": "a"}, frameworks
    )
    assert [h["name"] for h in config["webhooks"]] == kept
    assert all(h["namespaceSelector"] == {"matchLabels": {"team": "a"}} for h in config["webhooks"])
    assert all(
        h["clientConfig"]["url"].startswith("https://127.0.0.1:1/") for h in config["webhooks"]
    )


def test_a_framework_the_runner_cannot_run_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"\['jobset'\] are not run here; choose from"):
        KueueManager(None, None, frameworks=("batch/job", "jobset"))  # type: ignore[arg-type]
