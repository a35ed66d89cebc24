"""What `gang-extender status` prints: the table, `-o wide`, `-o json|yaml`, one group.

Pure text from `status_report.GroupRow`s and `status_rooms.NodeRoom`s; the
command (extender/cli.py) reads, computes and prints.
"""

from __future__ import annotations

import json
from typing import Any

from extender.status_report import GroupRow, StatusObjects
from extender.status_rooms import NodeRoom, candidate_nodes, node_rooms

STATUS_HEADER = (
    "NAMESPACE",
    "NAME",
    "PHASE",
    "PLACED/MIN",
    "RUNNING",
    "SOURCE",
    "QUEUE",
    "PRIORITY",
    "WAITING FOR",
)
# -o wide: the nodes the members are bound to, before the free text.
WIDE_HEADER = (*STATUS_HEADER[:-1], "NODES", STATUS_HEADER[-1])
ROOM_HEADER = ("NODE", "GPUS", "FREE", "HELD BY")


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last one (free text) is not padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]).rstrip()
        for row in rows
    )


def cells(row: GroupRow, *, wide: bool = False) -> tuple[str, ...]:
    first = (
        row.namespace,
        row.name,
        row.phase,
        row.placed_of_min,
        str(row.running),
        row.source_cell,
        row.queue,
        str(row.priority),
    )
    nodes = (",".join(row.nodes) or "-",) if wide else ()
    return (*first, *nodes, row.waiting_for)


def table(rows: list[GroupRow]) -> str:
    return format_table([STATUS_HEADER, *(cells(r) for r in rows)])


def _room_lines(rooms: list[NodeRoom], indent: str = "") -> list[str]:
    lines = format_table(
        [
            ROOM_HEADER,
            *((r.name, str(r.gpus), str(r.free), ", ".join(r.held_by) or "-") for r in rooms),
        ]
    )
    return [indent + line for line in lines.splitlines()]


def wide(rows: list[GroupRow], objects: StatusObjects) -> str:
    """The table with NODES, then each held group's candidate nodes: GPUs, free, held by."""
    out = [format_table([WIDE_HEADER, *(cells(r, wide=True) for r in rows)])]
    if objects.nodes is None:
        out.append("(nodes not readable with your credentials: no GPU room shown)")
        return "\n".join(out)
    rooms = node_rooms(objects)
    for row in rows:
        candidates = candidate_nodes(row, objects, rooms)
        if candidates:
            out.append(f"\n{row.namespace}/{row.name} ({row.phase}): GPUs on its candidate nodes")
            out.extend(_room_lines(candidates, "  "))
    return "\n".join(out)


def as_data(rows: list[GroupRow], silence: str | None) -> dict[str, Any]:
    """-o json|yaml: every group with its members and conditions."""
    return {
        "service": {"answering": silence is None, "message": silence or ""},
        "groups": [
            {
                "namespace": r.namespace,
                "name": r.name,
                "phase": r.phase,
                "theirPhase": r.their_phase or None,
                "placed": r.placed,
                "minMember": r.min_member,
                "running": r.running,
                "source": r.source,
                "queue": None if r.queue == "-" else int(r.queue),
                "priority": r.priority,
                "waitingFor": r.waiting_for,
                "nodes": list(r.nodes),
                "members": [m.__dict__ for m in r.members],
                "conditions": list(r.conditions),
            }
            for r in rows
        ],
    }


def as_json(rows: list[GroupRow], silence: str | None) -> str:
    return json.dumps(as_data(rows, silence), indent=2)


def detail(row: GroupRow, objects: StatusObjects) -> str:
    """`status <group>`: the row, its conditions, its members, its candidate nodes."""
    fields = [
        ("Name", row.name),
        ("Namespace", row.namespace),
        ("Source", row.source_cell),
        ("Phase", row.phase),
        ("Placed/Min", row.placed_of_min),
        ("Running", str(row.running)),
        ("Queue", row.queue),
        ("Priority", str(row.priority)),
        ("Waiting for", row.waiting_for or "-"),
    ]
    out = [f"{k + ':':<14}{v}" for k, v in fields]
    out.append("Conditions:")
    if row.conditions:
        conditions = [
            (
                str(c.get("type", "")),
                str(c.get("status", "")),
                str(c.get("reason", "")),
                str(c.get("message", "")),
            )
            for c in row.conditions
        ]
        out.extend(
            "  " + line
            for line in format_table(
                [("TYPE", "STATUS", "REASON", "MESSAGE"), *conditions]
            ).splitlines()
        )
    else:
        out.append("  (none written)")
    out.append("Members:")
    if row.members:
        members = [
            (m.name, m.task, m.scheduler, m.node or "<none>", m.phase, m.scheduler_reason)
            for m in sorted(row.members, key=lambda m: m.name)
        ]
        header = ("NAME", "TASK", "SCHEDULER", "NODE", "PHASE", "LAST KUBE-SCHEDULER REASON")
        out.extend("  " + line for line in format_table([header, *members]).splitlines())
    else:
        out.append("  (no pods)")
    if objects.nodes is not None:
        candidates = candidate_nodes(row, objects, node_rooms(objects))
        if candidates:
            out.append("Candidate nodes:")
            out.extend(_room_lines(candidates, "  "))
    return "\n".join(out)
