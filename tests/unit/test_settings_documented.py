"""Every setting a user can set is in docs/deploy.md's configuration table.

Settings are added by many changes; a table kept by hand drifts unless a test
holds it to the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from extender.config import Settings

DEPLOY_DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def _documented() -> set[str]:
    text = DEPLOY_DOC.read_text()
    table = text[text.index("## Configuration") :]
    table = table[: table.index("\n\n", table.index("| setting |"))]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {name for cell in first_cells for name in re.findall(r"`([a-z0-9_]+)`", cell)}


def test_every_setting_has_a_row_with_its_env_variable() -> None:
    missing = set(Settings.model_fields) - _documented()
    assert not missing, f"document {sorted(missing)} in docs/deploy.md ## Configuration"


def test_no_row_documents_a_setting_that_does_not_exist() -> None:
    stale = _documented() - set(Settings.model_fields)
    assert not stale, f"docs/deploy.md documents settings that do not exist: {sorted(stale)}"
