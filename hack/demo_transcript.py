#!/usr/bin/env python3
"""The `make demo` transcript in README.md: regenerated from a real run, checked for drift.

    .venv/bin/python hack/demo_transcript.py          # run the demo, rewrite README's block
    .venv/bin/python hack/demo_transcript.py --check  # run it, exit 1 if README differs

The block follows the marker `<!-- demo-transcript -->` in README.md and holds what
`gang-extender demo` prints from its first `== kubectl apply` line on (the lines
before it say how long start-up took). A run differs from the last only in names
and placements the cluster picks: the namespace suffix, pods' generated suffixes,
and which member lands on which node with which hostname index. `normalise`
replaces exactly those, so anything else the demo prints differently is drift;
tests/e2e/test_demo_transcript.py runs the demo and compares.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKER = "<!-- demo-transcript -->"
FIRST_LINE = "== kubectl apply"
# A placement line: `   <pod>  -> <node>   (<hostname>.<subdomain>)`.
PLACEMENT = re.compile(r"^   (\S+)\s+-> (\S+)\s+\((\S+)\)$")


def transcript(stdout: str) -> str:
    """What the README shows of a demo's output: from the first `== kubectl apply` on."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(FIRST_LINE))
    kept = [line for line in lines[start:] if not line.startswith("cluster left running")]
    return "\n".join(kept).rstrip() + "\n"


def _name(text: str) -> str:
    text = re.sub(r"\b(horovod)-[0-9a-f]{8}\b", r"\1-<ns>", text)  # new_namespace: 8 hex digits
    # A Deployment's pods: <deployment>-<pod-template-hash>-<random 5>.
    return re.sub(r"-[a-z0-9]{6,10}-[a-z0-9]{5}\b", "-<hash>-<id>", text)


def normalise(text: str) -> str:
    """`text` with the run-to-run choices of the cluster replaced (see the module doc)."""
    out, placements = [], []
    for line in text.splitlines():
        placed = PLACEMENT.match(line)
        if placed:
            pod, _node, host = placed.groups()
            host = re.sub(r"-\d+\.", "-<i>.", host)  # the task index a member got
            placements.append(f"   {_name(pod)} -> <node> ({host})")
            continue
        out.extend(sorted(placements))
        placements = []
        out.append(_name(line))
    out.extend(sorted(placements))
    return "\n".join(out).rstrip() + "\n"


def readme_block(readme: str) -> str:
    """The fenced block after the marker."""
    at = readme.index(MARKER)
    found = re.compile(r"```\n(.*?)```", re.S).search(readme, at)
    if not found:
        raise ValueError(f"no fenced block after {MARKER} in README.md")
    return found.group(1)


def replace_block(readme: str, block: str) -> str:
    old = readme_block(readme)
    at = readme.index(MARKER)
    return readme[:at] + readme[at:].replace(f"```\n{old}```", f"```\n{block}```", 1)


def run_demo(gang_extender: str) -> str:
    with tempfile.TemporaryDirectory(prefix="demo-transcript-") as workdir:
        done = subprocess.run(
            [gang_extender, "demo", "--workdir", workdir],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"gang-extender demo exited {done.returncode}")
    return done.stdout


def main(argv: list[str]) -> int:
    check = "--check" in argv
    gang_extender = str(Path(sys.executable).parent / "gang-extender")
    printed = transcript(run_demo(gang_extender))
    readme = README.read_text()
    if check:
        if normalise(printed) != normalise(readme_block(readme)):
            sys.stderr.write(
                "README.md's demo transcript differs from what `make demo` prints now:\n"
                + printed
                + "run: .venv/bin/python hack/demo_transcript.py\n"
            )
            return 1
        return 0
    README.write_text(replace_block(readme, printed))
    print(printed, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
