"""Every node in the planner's order, kept as nodes change instead of sorted per plan.

Pure. The planner takes a gang's members one by one onto the first node, in the
order of `static_key` (binpack: fewest free GPUs, then cpu, then name; spread: most
free first), that the member fits and may use. Sorting every node per plan was
most of a plan's cost on a large cluster (5,000 nodes: ~30 ms a plan, nearly all
in `sorted`). The score board (domain/planning/scoring.py) refreshes only the nodes whose
room changed, so it keeps this order too, one bisection per changed node;
`GangCore` hands it to `planner.plan_gang` with the room it was built from.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from extender.domain.objects.model import Resources
from extender.domain.objects.policy import Strategy
from extender.domain.objects.quantity import CPU, GPU

NodeKey = tuple[int, int, str]


def static_key(
    strategy: Strategy, node: str, free: Mapping[str, int], resource: str = GPU
) -> NodeKey:
    """The order nodes no member was placed on yet are tried in, for any pod.

    On such a node the planner's per-pod rank only shifts free GPU and cpu by the
    pod's (constant) request, so this order is the rank order: the first node in it
    that the pod fits and may use is its best untouched node. `resource` is the
    gang's accelerator resource (domain/objects/accelerators.py).
    """
    gpu, cpu = free.get(resource, 0), free.get(CPU, 0)
    if strategy is Strategy.SPREAD:
        return (-gpu, -cpu, node)
    return (gpu, cpu, node)


@dataclass
class NodeOrder:
    """Node names sorted by `static_key`, with each one's free accelerators beside it.

    Kept for one accelerator resource (`resource`): a gang asking another is planned
    on an order sorted for it (the planner checks `resource`).
    """

    strategy: Strategy
    keys: list[NodeKey] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    _key_of: dict[str, NodeKey] = field(default_factory=dict)
    resource: str = GPU

    @classmethod
    def of(
        cls, strategy: Strategy, free: Mapping[str, Resources], resource: str = GPU
    ) -> NodeOrder:
        order = cls(strategy, resource=resource)
        order.keys = sorted(
            static_key(strategy, name, room, resource) for name, room in free.items()
        )
        order.names = [key[2] for key in order.keys]
        order.gpus = [free[name].get(resource, 0) for name in order.names]
        order._key_of = dict(zip(order.names, order.keys, strict=True))
        return order

    def __len__(self) -> int:
        return len(self.names)

    def update(self, name: str, room: Mapping[str, int] | None) -> None:
        """Move `name` to where `room` puts it; None takes it out."""
        old = self._key_of.pop(name, None)
        if old is not None:
            at = bisect_left(self.keys, old)
            del self.keys[at], self.names[at], self.gpus[at]
        if room is None:
            return
        key = static_key(self.strategy, name, room, self.resource)
        at = bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.names.insert(at, name)
        self.gpus.insert(at, room.get(self.resource, 0))
        self._key_of[name] = key

    def with_rooms(self, rooms: Iterable[tuple[str, Mapping[str, int]]]) -> NodeOrder:
        """A copy in which the named nodes have these rooms instead (a few, usually none)."""
        rooms = list(rooms)
        if not rooms:
            return self
        copy = NodeOrder(
            self.strategy,
            list(self.keys),
            list(self.names),
            list(self.gpus),
            dict(self._key_of),
            self.resource,
        )
        for name, room in rooms:
            copy.update(name, room)
        return copy
