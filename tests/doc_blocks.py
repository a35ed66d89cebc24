"""The shell blocks of the docs a user runs, and how tests run them (docs/testing.md).

Every ```bash block of README.md, docs/*.md, examples/*/README.md and the chart's
README.md is preceded by a marker that says how it is tested:

    <!-- doc-test: run -->            as written, on the local cluster with the gang stack
    <!-- doc-test: install -->        as written, on a control plane of its own without
                                      gang-extender (`dev up --cluster-only`): kustomize, Helm
    <!-- doc-test: real-cluster -->   needs a real cluster (GPUs, an image): on the local
                                      cluster, what creates or changes objects runs with
                                      --dry-run=server (the block's namespace, its label and
                                      RoleBinding for real), reads run, logs are not read
    <!-- doc-test: example -->        an example's local block: tests/e2e/test_examples.py
    <!-- doc-test: skip: <why> -->    not run, and why

Only namespaces are substituted (made unique per run); `gang-extender dev up/down`
lines are the fixtures' work, and `pip install` lines tests/packaging's.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [
        REPO / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "examples").glob("*/README.md"),
        REPO / "charts" / "gang-extender" / "README.md",
    ]
)
MODES = ("run", "install", "real-cluster", "example", "skip")
MARKER = re.compile(r"<!-- doc-test: ([a-z-]+)(?::\s*(.*?))? -->\n```bash\n(.*?)```", re.S)
FIXED_NAMESPACES = {"gang-system", "kube-system", "default"}
# What changes objects: on a real-cluster block it runs with --dry-run=server.
CHANGES = re.compile(
    r"^kubectl\s+(?:-n\s+\S+\s+)?(apply|create|delete|patch|label|annotate|set|drain|taint)\b"
)
# What a real-cluster block runs for real: the block's own namespace and its opt-ins.
FOR_REAL = re.compile(
    r"^kubectl\s+(?:-n\s+\S+\s+)?(create namespace|label namespace|create rolebinding)\b"
)
NOT_RUN_ON_A_LOCAL_CLUSTER = re.compile(
    r"^(kubectl\s+(?:-n\s+\S+\s+)?(logs|port-forward)\b|curl\b)"
)


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    mode: str
    why: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text()
    return [
        Block(doc, text[: m.start()].count("\n") + 2, m.group(1), m.group(2) or "", m.group(3))
        for m in MARKER.finditer(text)
    ]


def unmarked(doc: Path) -> list[int]:
    """Lines of ```bash blocks with no marker right before them."""
    text = doc.read_text()
    marked = {m.start(3) for m in MARKER.finditer(text)}
    return [
        text[: m.start()].count("\n") + 1
        for m in re.finditer(r"^```bash\n", text, re.M)
        if m.end() not in marked
    ]


def commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, a heredoc kept with its command."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1].rstrip() + " " + lines[i].strip()
        heredoc = re.search(r"<<'?(\w+)'?", line)
        if heredoc:
            end = heredoc.group(1)
            while i + 1 < len(lines):
                i += 1
                line += "\n" + lines[i]
                if lines[i].strip() == end:
                    break
        out.append(line)
        i += 1
    return out


def split_comment(command: str) -> tuple[str, str]:
    """(command, comment): the comment follows an unquoted `  #`."""
    first = command.split("\n", 1)
    match = re.search(r"\s+#(\s.*)?$", first[0])
    if match and "'" not in first[0][match.start() :]:
        rest = "\n" + first[1] if len(first) > 1 else ""
        return first[0][: match.start()].rstrip() + rest, (match.group(1) or "").strip()
    return command, ""


_NAMESPACE_USE = r"(\bnamespace\s+|\s-n\s+|--namespace[ =])"


def namespaces_of(text: str) -> set[str]:
    """The namespaces a block names (not gang-system, kube-system, default)."""
    found = set(re.findall(_NAMESPACE_USE + r"([a-z][a-z0-9-]*)\b", text))
    names = {name for _, name in found}
    for listed in re.findall(r"namespaceBindings=\{([^}]*)\}", text):
        names.update(n.strip() for n in listed.split(",") if n.strip())
    return names - FIXED_NAMESPACES


def unique_namespaces(names: set[str]) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:5]
    return {name: f"{name}-{suffix}" for name in names}


def substitute(command: str, renamed: dict[str, str]) -> str:
    for old, new in renamed.items():
        command = re.sub(_NAMESPACE_USE + re.escape(old) + r"\b", rf"\g<1>{new}", command)
        command = re.sub(
            r"(namespaceBindings=\{[^}]*)\b" + re.escape(old) + r"\b", rf"\g<1>{new}", command
        )
    return command


RETRY = """retry() {  # a read that may come a moment before the object does
  for _ in $(seq 60); do "$@" && return 0; sleep 1; done; "$@"
}
"""


def script(block: Block, renamed: dict[str, str]) -> tuple[str, list[str]]:
    """The bash script a test runs for `block`, and the commands it left out (and why)."""
    run: list[str] = []
    left: list[str] = []
    for raw in commands(block.text):
        command, _comment = split_comment(raw)
        if not command.strip() or command.lstrip().startswith("#"):
            continue
        if re.match(r"gang-extender dev (up|down)\b", command):
            left.append(f"{command}  (the test's cluster stands in for it)")
            continue
        if command.startswith("pip "):
            left.append(f"{command}  (tests/packaging installs the wheel and sdist)")
            continue
        command = substitute(command, renamed)
        bare = command.lstrip()
        if block.mode == "real-cluster":
            if NOT_RUN_ON_A_LOCAL_CLUSTER.match(bare):
                left.append(f"{command}  (reads what a real cluster's pods print)")
                continue
            if CHANGES.match(bare) and not FOR_REAL.match(bare):
                first, *rest = command.split("\n", 1)
                command = "\n".join([first + " --dry-run=server", *rest])
        if re.match(r"kubectl\s+(?:-n\s+\S+\s+)?get\b", bare) and "|" not in command:
            command = "retry " + command
        run.append(command)
    return "set -euo pipefail\n" + RETRY + "\n".join(run) + "\n", left
