"""What a newcomer copies from the docs runs as written (issue: the second hour).

Read-only checks of README.md, examples/*/README.md and docs/: every namespace
a block uses is created first, the examples' real-cluster blocks bind the
service's namespace role, the MPIJob example tells which status the service writes
into scheduler-plugins' PodGroup, and every alert has a runbook entry.
The blocks themselves are run against a cluster by tests/e2e/test_doc_blocks.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from extender.domain.status.foreign_status import COSCHEDULING_PHASES

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (REPO / "examples").glob("*/README.md"))
# Created by the install itself (deploy/namespace.yaml, Helm's --create-namespace).
INSTALLED_NAMESPACES = {"gang-system", "kube-system", "default"}


def bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"```(?:bash|sh)\n(.*?)```", markdown, re.S)


def section(markdown: str, heading: str) -> str:
    """The text under the first heading that starts with `heading`, to the next heading."""
    found = re.search(rf"^#+ {re.escape(heading)}.*$", markdown, re.M)
    assert found, f"no heading {heading!r}"
    rest = markdown[found.end() :]
    following = re.search(r"^#+ ", rest, re.M)
    return rest[: following.start()] if following else rest


def namespaces_used_before_created(block: str) -> list[str]:
    """Namespaces a block names (`-n X`, `--namespace X`, `namespace X`, Helm's
    `namespaceBindings={X,...}`) before a `kubectl create namespace X` in it."""
    created: set[str] = set(INSTALLED_NAMESPACES)
    early = []
    for line in block.splitlines():
        line = line.split("  #")[0]
        made = re.findall(r"kubectl create namespace (\S+)", line)
        used = re.findall(r"(?:\s-n|--namespace[ =]|\bnamespace)\s+([a-z][a-z0-9-]*)", line)
        for listed in re.findall(r"namespaceBindings=\{([^}]*)\}", line):
            used += [n.strip() for n in listed.split(",") if n.strip()]
        if "--create-namespace" in line:
            made += re.findall(r"\s-n\s+(\S+)", line)
        created.update(made)
        early += [n for n in used if n not in created and n not in made]
    return early


def test_the_namespace_checker_finds_a_namespace_used_before_it_exists() -> None:
    assert namespaces_used_before_created(
        "helm install x c -n gang-system --create-namespace --set 'namespaceBindings={t}'\n"
    ) == ["t"]
    assert (
        namespaces_used_before_created(
            "kubectl create namespace t\nkubectl label namespace t a=b\nkubectl -n t get pods\n"
        )
        == []
    )
    assert namespaces_used_before_created("kubectl label namespace t a=b\n") == ["t"]


DOCS_WITH_INSTALL_BLOCKS = [
    REPO / "README.md",
    REPO / "docs" / "deploy.md",
    *(e / "README.md" for e in EXAMPLES),
]
# The sections of the README and docs/deploy.md a newcomer copies to install.
INSTALL_SECTIONS = {"README.md": "Install on a real cluster", "docs/deploy.md": "Helm"}


@pytest.mark.parametrize("doc", DOCS_WITH_INSTALL_BLOCKS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_namespace_a_block_uses_is_created_first(doc: Path) -> None:
    """Finding 1: the README's Helm block bound `my-team` before anything created it,
    and the release was left failed. Examples' later blocks may use the namespace
    their first block creates."""
    text = doc.read_text()
    where = str(doc.relative_to(REPO))
    if where in INSTALL_SECTIONS:  # other blocks run in the reader's own namespace
        text = section(text, INSTALL_SECTIONS[where])
    blocks = bash_blocks(text)
    created_earlier: set[str] = set()
    for block in blocks:
        early = [n for n in namespaces_used_before_created(block) if n not in created_earlier]
        assert not early, (
            f"{doc.name}: a block uses namespace(s) {early} before creating them:\n{block}"
        )
        # a section's blocks are one walk through: a later one may use what an earlier made
        created_earlier.update(re.findall(r"kubectl create namespace (\S+)", block))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_a_real_cluster_block_binds_the_service_in_the_namespace(example: Path) -> None:
    """Finding 2: without the RoleBinding to gang-extender-namespace no SSH Secret,
    hostfiles or Service are written on a real cluster (`dev up` binds it for you)."""
    block = "\n".join(
        bash_blocks(section((example / "README.md").read_text(), "On a real cluster"))
    )
    (namespace,) = set(re.findall(r"kubectl create namespace (\S+)", block))
    binding = re.search(
        rf"kubectl -n {namespace} create rolebinding gang-extender\s*\\?\s*"
        r"--clusterrole=gang-extender-namespace --serviceaccount=gang-system:gang-extender",
        block,
    )
    assert binding, f"{example.name}: no RoleBinding to gang-extender-namespace in {namespace}"
    assert block.index("create rolebinding") < block.index("kubectl apply -n")


def test_the_mpijob_example_maps_our_phase_to_scheduler_plugins_status() -> None:
    """Finding 3: the README said the service writes no status there; it does, in
    scheduler-plugins' words, and `gang-extender status` shows both phases."""
    text = (REPO / "examples" / "mpijob" / "README.md").read_text()
    assert "writes no status" not in text
    rows = {
        tuple(c.strip(" `") for c in line.strip("|").split("|")[:2])
        for line in text.splitlines()
        if line.startswith("|")
    }
    for ours, theirs in COSCHEDULING_PHASES.items():
        assert (ours, theirs) in rows, f"no row `{ours}` | `{theirs}` in the mapping table"
    for field in ("phase", "running", "succeeded", "failed", "scheduleStartTime"):
        assert f"`{field}`" in text


def alerts() -> list[str]:
    rule = yaml.safe_load((REPO / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    return [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_the_alert_list_of_metrics_md_is_the_prometheusrule_s() -> None:
    table = section((REPO / "docs" / "metrics.md").read_text(), "Alerts")
    assert sorted(re.findall(r"^\| \[?`(GangExtender\w+)`", table, re.M)) == sorted(alerts())


@pytest.mark.parametrize("alert", alerts())
def test_every_alert_has_a_runbook_entry(alert: str) -> None:
    """Finding 6: metrics.md sends each alert to troubleshooting.md, which covered one.
    Each entry is a heading named after the alert, saying what it means, what to
    check, and the fix."""
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    assert re.search(rf"^### `{alert}`", text, re.M), f"no runbook heading for {alert}"
    entry = section(text, f"`{alert}`")
    for part in ("**Means**", "**Check**", "**Fix**"):
        assert part in entry, f"the {alert} entry has no {part}"
    assert "```bash" in entry, f"the {alert} entry shows no command to check with"
    anchor = "troubleshooting.md#" + alert.lower()
    assert anchor in (REPO / "docs" / "metrics.md").read_text(), f"metrics.md links no {anchor}"
