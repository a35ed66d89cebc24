"""README.md's `make demo` transcript is what `make demo` prints now.

The demo runs for real (its own local control plane, as `make demo` starts it),
and its output is compared with the README's block after hack/demo_transcript.py's
`normalise`, which replaces only what the cluster picks run to run: the
namespace suffix, pods' generated suffixes and the placement lines' nodes and
task indexes. Regenerate the block with `.venv/bin/python hack/demo_transcript.py`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def demo_transcript() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "demo_transcript", REPO / "hack" / "demo_transcript.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_transcript_is_what_make_demo_prints(bin_dir: Path, tmp_path: Path) -> None:
    script = demo_transcript()
    done = subprocess.run(
        [sys.executable, "-m", "extender", "demo", "--workdir", str(tmp_path / "demo")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GANG_E2E_BIN_DIR": str(bin_dir)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = script.transcript(done.stdout)
    shown = script.readme_block((REPO / "README.md").read_text())
    assert script.normalise(shown) == script.normalise(printed), (
        "README.md's demo transcript drifted; run .venv/bin/python hack/demo_transcript.py\n"
        + printed
    )
