"""`gang-extender status -o wide` and `status <group>`: where the GPUs are, and who holds them.

Pure, from the same snapshot as `status_report`: per node with an accelerator
resource (`nvidia.com/gpu`, `amd.com/gpu`, ...: the default accelerator resources,
domain/objects/accelerators.py; every one a node offers is added up), its allocatable GPUs, how many are free, and who holds the rest: gangs' bound
members, other gangs' plans (members not bound yet whose `gang-extender.io/planned-node`
names the node), plain pods, and starvation reservations (placeholder pods, and the
`gang-extender.io/reserved` taint). A held group's candidate nodes are the GPU
nodes whose labels match its unbound members' nodeSelector.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from extender.domain.cluster.fences import FENCE_TAINT_KEY
from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS
from extender.domain.objects.membership import PLANNED_NODE_ANNOTATION, GroupKey
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.status_report import GroupRow, StatusObjects


@dataclass(frozen=True)
class NodeRoom:
    name: str
    gpus: int
    free: int
    held_by: tuple[str, ...]  # "team-b/train: 4 bound", "team-b/big: 2 planned", ...


def _gpus(pod: PodInfo) -> int:
    return DEFAULT_ACCELERATORS.amount(pod.requests)


def node_rooms(objects: StatusObjects) -> dict[str, NodeRoom]:
    """Every node with GPUs, by name; {} when the nodes could not be read."""
    nodes = [NodeInfo.from_api(n) for n in objects.nodes or []]
    with_gpus = {n.name: n for n in nodes if DEFAULT_ACCELERATORS.offered(n.allocatable)}
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    used: dict[str, int] = defaultdict(int)
    for obj in objects.pods:
        pod = PodInfo.from_api(obj)
        if pod.deleting or pod.phase in ("Succeeded", "Failed") or not _gpus(pod):
            continue
        planned = ((obj.get("metadata") or {}).get("annotations") or {}).get(
            PLANNED_NODE_ANNOTATION
        )
        node = pod.node_name or planned
        if node not in with_gpus:
            continue
        if pod.placeholder_for is not None:
            holder = f"{pod.placeholder_for}: reserved"
        elif pod.group is not None:
            holder = f"{pod.group}: {'bound' if pod.node_name else 'planned'}"
        else:
            holder = f"pod {pod.ref}"
        held[node][holder] += _gpus(pod)
        used[node] += _gpus(pod)
    rooms = {}
    for name, node in sorted(with_gpus.items()):
        total = DEFAULT_ACCELERATORS.amount(node.allocatable)
        who = [
            f"{h} {n}" if not h.startswith("pod ") else f"{h} ({n})" for h, n in held[name].items()
        ]
        fence = next((t.value for t in node.taints if t.key == FENCE_TAINT_KEY), None)
        if fence:
            who.append(f"taint {FENCE_TAINT_KEY}={fence}")
        rooms[name] = NodeRoom(name, total, max(0, total - used[name]), tuple(sorted(who)))
    return rooms


def candidate_nodes(
    row: GroupRow, objects: StatusObjects, rooms: dict[str, NodeRoom]
) -> list[NodeRoom]:
    """The GPU nodes a held group could use: those matching its unbound members'
    nodeSelector (all GPU nodes when they set none); [] for a placed group."""
    if row.phase in ("Scheduled", "Running", "Succeeded"):
        return []
    selectors = []
    for obj in objects.pods:
        pod = PodInfo.from_api(obj)
        if pod.group == GroupKey(row.namespace, row.name) and not pod.node_name:
            selectors.append(pod.node_selector)
    labels = {NodeInfo.from_api(n).name: NodeInfo.from_api(n).labels for n in objects.nodes or []}
    return [
        room
        for name, room in rooms.items()
        if all(all(labels.get(name, {}).get(k) == v for k, v in s.items()) for s in selectors)
    ]
