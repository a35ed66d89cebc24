"""README.md's architecture picture is rendered from its source, docs/architecture.dot.

hack/architecture.sh --check renders the source with Graphviz's dot (installing
Debian's graphviz package when it can) and fails when the committed SVG differs;
the README shows the SVG, and the source names every part the README's table does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_svg_is_what_the_dot_source_renders() -> None:
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "architecture.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def test_the_readme_shows_the_picture_and_the_source_names_every_part() -> None:
    assert "![" in (REPO / "README.md").read_text()
    assert "(docs/architecture.svg)" in (REPO / "README.md").read_text()
    source = (REPO / "docs" / "architecture.dot").read_text()
    for part in (
        "kube-apiserver",
        "gang kube-scheduler",
        "scheduler extender",
        "mutating webhook",
        "controller",
        "Lease",
        "gang-extender-ca",
        "gang-extender-scheduler-client",
        "gang-extender-webhook-path",
        "MutatingWebhookConfiguration",
        "/metrics",
    ):
        assert part in source, part
