"""The release artifacts work: `python -m build` makes a wheel and an sdist, and
each installs into a fresh venv whose `gang-extender --help` runs.

Slow-ish (one venv, dependencies from pip's cache or the index: 1-3 min), so it
is marked `packaging`; `make test` runs it, `pytest -m "not packaging"` skips it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(1200)]


def _run(*argv: str | Path, cwd: Path, timeout: float = 600) -> str:
    # Budgets, not figures: a pip install into a fresh venv took over 300 s with the
    # e2e workers and CI's background builds on the same 2 cores.
    # No PYTHONPATH: the installed copy must work on its own, not the checkout's.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _help_runs(bin_dir: Path, cwd: Path) -> None:
    out = _run(bin_dir / "gang-extender", "--help", cwd=cwd)
    assert "serve" in out, out
    # It is the installed package that answered, not the source tree.
    where = _run(bin_dir / "python", "-c", "import extender; print(extender.__file__)", cwd=cwd)
    assert str(ROOT / "extender") not in where, where


def test_python_m_build_makes_a_wheel_and_an_sdist_that_install_and_run(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="pip install -e '.[dev]' installs build")
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=tmp_path)
    wheels = list(dist.glob("gang_extender-*.whl"))
    sdists = list(dist.glob("gang_extender-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    pip = (bin_dir / "python", "-m", "pip", "--disable-pip-version-check", "install", "--quiet")

    _run(*pip, wheels[0], cwd=tmp_path)
    _help_runs(bin_dir, tmp_path)

    # The sdist, built into a wheel by pip, replaces it (dependencies are already there).
    _run(*pip, "--force-reinstall", "--no-deps", sdists[0], cwd=tmp_path)
    _help_runs(bin_dir, tmp_path)
