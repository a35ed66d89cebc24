"""The cluster as the scheduling core sees it: nodes, pods, group specs, and what is free.

Kept incrementally (the watch cache calls `upsert_*`/`delete_*`), so a filter
request costs the size of its answer, not the size of the cluster. Pure data:
no I/O, no clocks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from extender.domain.cluster.fences import observed_fence
from extender.domain.cluster.foreign_podgroups import PODGROUP_SOURCES, pick_podgroup
from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.domain.objects.limits import listing
from extender.domain.objects.membership import MIN_AVAILABLE_ANNOTATION, SCHEDULER_NAME, GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo, Resources
from extender.domain.objects.quantity import GPU


def add_into(total: Resources, delta: Mapping[str, int], sign: int = 1) -> None:
    for name, value in delta.items():
        total[name] = total.get(name, 0) + sign * value


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every requested resource is available (a resource a node lacks is 0)."""
    return all(value <= free.get(name, 0) for name, value in request.items() if value > 0)


def _matters_to_plans(pod: PodInfo) -> bool:
    """A version of a pod that plans read: a group member, or a pod holding capacity.

    A change between two versions of a pod neither of which does (a pending plain
    pod, a finished one) cannot alter any gang's plan.
    """
    return pod.group is not None or pod.group_error is not None or pod.holds_capacity


class ClusterSnapshot:
    def __init__(self, accelerators: Accelerators = DEFAULT_ACCELERATORS) -> None:
        # Which resources are accelerators (the GANG_ACCELERATOR_RESOURCES setting):
        # the core's GPU figures key on them.
        self.accelerators = accelerators
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self._used: dict[str, Resources] = defaultdict(dict)
        self._members: dict[GroupKey, set[str]] = defaultdict(set)
        # Members carrying a gang-extender.io/tasks layout, usually none: group_spec
        # looks only at these, so a big group without the annotation costs nothing.
        self._laid_out: dict[GroupKey, set[str]] = defaultdict(set)
        # PodGroup objects by source (ours, Volcano's, scheduler-plugins', Kubernetes'):
        # which one decides a name is foreign_podgroups.pick_podgroup's call.
        self._podgroups: dict[str, dict[GroupKey, GroupSpec]] = defaultdict(dict)
        # Placeholder pods (domain/starvation/placeholders.py) by uid: few, looked at per node.
        self.placeholders: dict[str, PodInfo] = {}
        # Nodes carrying a reservation fence taint (domain/cluster/fences.py), node -> value:
        # few, and the core compares them with what it wants on every upkeep pass.
        self.fences: dict[str, str] = {}
        # Bumped on every change to what the snapshot holds.
        self.generation = 0
        # Bumped only on a change that can alter a gang's plan or why it waits: a node
        # that changed, capacity a pod holds, a group's members, a PodGroup. Not on a
        # node's heartbeat or a plain pod's status that changes neither: the core
        # memoises "this gang does not fit" on it (GangPlanning.try_plan), so such events
        # cost held gangs nothing.
        self.planning_generation = 0
        # Nodes whose allocatable or used capacity changed since the core last
        # drained this set: it rescores only those (see GangCore.prioritize).
        self.capacity_changed: set[str] = set()
        # For the held gangs' memo (domain/planning/shortfalls.py), drained by the core: groups
        # whose members or PodGroup changed, nodes whose labels changed, and whether
        # everything was replaced (a re-list: every memo is void).
        self.groups_changed: set[GroupKey] = set()
        # Per group, bumped with every change to its members or PodGroup; and one
        # count for every node change (not heartbeats): the held-gang queue view
        # (domain/queue/held_queue.py) recomputes only what these say changed.
        self._group_versions: dict[GroupKey, int] = defaultdict(int)
        self.nodes_generation = 0
        self.relabelled: set[str] = set()
        self.replaced = False
        # Groups whose version moved since the held-gang queue view last looked
        # (drained by the queue part, gang_queue.QueueOrder.held_queue_view): it reads these, not every group's version.
        self.held_changed: set[GroupKey] = set()
        # Priorities of the pods that hold capacity, counted: the lowest one says
        # whether a gang of some priority has anything to preempt.
        self._holding_priorities: Counter[int] = Counter()
        # Every node's place in the order of node news, oldest first: a node's news is
        # its joining (a name deleted and added again joins anew) or a change the core
        # reads (labels, taints, cordon, allocatable; not a status heartbeat).
        # kube-scheduler's last word on a member says nothing of a node whose news came
        # after it (`news_since`, domain/planning/restrictions.py): that word judged the node as
        # it was (not ready, tainted), or not at all.
        self._news: dict[str, int] = {}
        self.node_news = 0

    # ---- nodes ----
    def upsert_node(self, node: NodeInfo, *, was: NodeInfo | None = None) -> None:
        """Store a node; `was`: what it was before a re-list (`replace_all`), for its news."""
        old = self.nodes.get(node.name)
        self.nodes[node.name] = node
        if (old or was) != node or node.name not in self._news:
            self._news.pop(node.name, None)  # to the newest end
            self.node_news += 1
            self._news[node.name] = self.node_news
        fence = observed_fence(node.taints)
        if fence is None:
            self.fences.pop(node.name, None)
        else:
            self.fences[node.name] = fence
        if old == node:  # a status heartbeat: nothing the core reads changed
            return
        if old is not None and old.labels != node.labels:
            self.relabelled.add(node.name)
        self.capacity_changed.add(node.name)
        self.generation += 1
        self.planning_generation += 1
        self.nodes_generation += 1

    def delete_node(self, name: str) -> None:
        self.fences.pop(name, None)
        self._news.pop(name, None)
        if self.nodes.pop(name, None) is not None:
            self.capacity_changed.add(name)
            self.generation += 1
            self.planning_generation += 1
            self.nodes_generation += 1

    def news_since(self, news: int) -> list[str]:
        """The nodes (still here) that joined or changed after the `news`-th node news,
        newest first.

        Costs the nodes returned: the news order is kept oldest first, so it is read
        from the newest end until an older one.
        """
        newer: list[str] = []
        for name, seq in reversed(self._news.items()):
            if seq <= news:
                break
            newer.append(name)
        return newer

    # ---- pods ----
    def upsert_pod(self, pod: PodInfo) -> PodInfo | None:
        """Insert or replace a pod; returns the previous version."""
        old = self.pods.get(pod.uid)
        if old is not None:
            self._forget(old)
        self.pods[pod.uid] = pod
        if pod.holds_capacity and pod.node_name is not None:
            add_into(self._used[pod.node_name], pod.requests)
            self.capacity_changed.add(pod.node_name)
            self._holding_priorities[pod.priority] += 1
        if pod.placeholder_for is not None:
            self.placeholders[pod.uid] = pod
        if pod.group is not None:
            self._members[pod.group].add(pod.uid)
            if pod.task_layout is not None:
                self._laid_out[pod.group].add(pod.uid)
        self.generation += 1
        if old != pod and (_matters_to_plans(pod) or (old is not None and _matters_to_plans(old))):
            self.planning_generation += 1
            self._group_changed(pod)
            if old is not None:
                self._group_changed(old)
        return old

    def delete_pod(self, uid: str) -> PodInfo | None:
        old = self.pods.pop(uid, None)
        if old is not None:
            self._forget(old)
            self.generation += 1
            if _matters_to_plans(old):
                self.planning_generation += 1
                self._group_changed(old)
        return old

    def _group_changed(self, pod: PodInfo) -> None:
        if pod.group is not None:
            self._touch_group(pod.group)

    def _touch_group(self, key: GroupKey) -> None:
        self.groups_changed.add(key)
        self.held_changed.add(key)
        self._group_versions[key] += 1

    def group_version(self, key: GroupKey) -> int:
        """Moves with every change to the group's members or PodGroup."""
        return self._group_versions.get(key, 0)

    def _forget(self, pod: PodInfo) -> None:
        if pod.holds_capacity and pod.node_name is not None:
            add_into(self._used[pod.node_name], pod.requests, -1)
            self.capacity_changed.add(pod.node_name)
            self._holding_priorities[pod.priority] -= 1
            if not self._holding_priorities[pod.priority]:
                del self._holding_priorities[pod.priority]
        self.placeholders.pop(pod.uid, None)
        if pod.group is not None:
            members = self._members.get(pod.group)
            if members is not None:
                members.discard(pod.uid)
                if not members:
                    del self._members[pod.group]
            laid_out = self._laid_out.get(pod.group)
            if laid_out is not None:
                laid_out.discard(pod.uid)
                if not laid_out:
                    del self._laid_out[pod.group]

    def replace_all(
        self, nodes: Iterable[NodeInfo], pods: Iterable[PodInfo], groups: Iterable[GroupSpec]
    ) -> None:
        """Rebuild from a fresh list (start-up, or a watch that expired with 410)."""
        self.capacity_changed.update(self.nodes)
        nodes = list(nodes)
        # A node listed again unchanged keeps its place in the news order: a re-list is
        # no news to kube-scheduler, and its last word on members still covers that node.
        # One that changed while unwatched is news (`upsert_node` compares).
        listed = {node.name for node in nodes}
        self._news = {name: seq for name, seq in self._news.items() if name in listed}
        before, self.nodes = self.nodes, {}
        self.pods = {}
        self._used = defaultdict(dict)
        self._members = defaultdict(set)
        self._laid_out = defaultdict(set)
        self._podgroups = defaultdict(dict)
        self.planning_generation += 1
        self.nodes_generation += 1
        self.replaced = True
        for key in self._group_versions:
            self._group_versions[key] += 1
        self.held_changed.update(self._group_versions)
        self._holding_priorities = Counter()
        self.placeholders = {}
        self.fences = {}
        for node in nodes:
            self.upsert_node(node, was=before.get(node.name))
        for pod in pods:
            self.upsert_pod(pod)
        for spec in groups:
            self.upsert_podgroup(spec)

    # ---- groups ----
    def upsert_podgroup(self, spec: GroupSpec) -> bool:
        """Store a PodGroup's spec; False when it equals the stored one (a status write,
        this service's own among them, changes nothing a plan reads)."""
        specs = self._podgroups[spec.source]
        if specs.get(spec.key) == spec:
            return False
        specs[spec.key] = spec
        self.generation += 1
        self.planning_generation += 1
        self._touch_group(spec.key)
        return True

    def delete_podgroup(self, source: str, key: GroupKey) -> None:
        if self._podgroups[source].pop(key, None) is not None:
            self.generation += 1
            self.planning_generation += 1
            self._touch_group(key)

    def lowest_holding_priority(self) -> int | None:
        """The lowest priority of a pod holding capacity (None: no pod holds any)."""
        return min(self._holding_priorities) if self._holding_priorities else None

    def podgroup(self, key: GroupKey) -> GroupSpec | None:
        found = [
            spec
            for source in PODGROUP_SOURCES
            if (spec := self._podgroups.get(source, {}).get(key)) is not None
        ]
        return pick_podgroup(found)

    def members(self, key: GroupKey) -> list[PodInfo]:
        """Active members of a group handled by this scheduler, oldest first."""
        found = [self.pods[uid] for uid in self._members.get(key, ())]
        return sorted(
            (p for p in found if p.is_active_member and p.scheduler_name == SCHEDULER_NAME),
            key=lambda p: (p.created, p.name),
        )

    def member_uids(self, key: GroupKey) -> list[str]:
        """Every pod of a group, finished ones included (status counts them)."""
        return sorted(self._members.get(key, ()))

    def group_keys(self) -> list[GroupKey]:
        keys = set(self._members)
        for specs in self._podgroups.values():
            keys.update(specs)
        return sorted(keys)

    def group_spec(self, key: GroupKey) -> GroupSpec | None:
        """The PodGroup, else a spec from the members' min-available annotation.

        Members that disagree about their size give a spec with `error` set: the
        group is not scheduled until they agree. A PodGroup gang-extender created
        (`managed`) gives way to its members' annotation. A spec without
        minTaskMember takes the members' gang-extender.io/tasks layout as its task
        minimums (`task_layout`).
        """
        spec = self._sized_spec(key)
        layout = self.task_layout(key)
        if spec is None or layout is None:
            return spec
        size_from = (
            f"annotation {MIN_AVAILABLE_ANNOTATION}"
            if spec.source == "annotation"
            else f"{spec.source} spec.minMember"
        )
        return spec.with_members_task_layout(layout, size_from=size_from)

    def task_layout(self, key: GroupKey) -> Mapping[str, int] | None:
        """The gang-extender.io/tasks layout of the group's members, None when none carries one.

        The first member by name that carries one (malformed ones were dropped when
        parsed) decides, as the webhook's layout for hostfiles does
        (injection/layout.py), so the plan and the hostfile count the same tasks.
        """
        carriers = [
            self.pods[uid]
            for uid in self._laid_out.get(key, ())
            if self.pods[uid].is_active_member and self.pods[uid].scheduler_name == SCHEDULER_NAME
        ]
        if not carriers:
            return None
        return min(carriers, key=lambda p: p.name).task_layout

    def _sized_spec(self, key: GroupKey) -> GroupSpec | None:
        spec = self.podgroup(key)
        if spec is not None and not spec.managed:
            return spec
        # A PodGroup gang-extender created from the annotation follows the members:
        # they decide while they carry it (the controller then updates the object).
        members = self.members(key)
        sizes = {p.min_available for p in members if p.min_available is not None}
        if not sizes:
            return spec
        if len(sizes) > 1:
            named = listing(
                f"{p.name}={p.min_available}" for p in members if p.min_available is not None
            )
            return GroupSpec(
                key=key,
                min_member=max(sizes),
                source="annotation",
                error=f"members disagree on gang-extender.io/min-available ({named}); "
                f"give every member the same value{rolling_update_hint(members)}",
            )
        return GroupSpec(key=key, min_member=sizes.pop(), source="annotation")

    # ---- capacity ----
    def used(self, node: str) -> Mapping[str, int]:
        return self._used.get(node, {})

    def free(self, node: str) -> Resources:
        info = self.nodes.get(node)
        if info is None:
            return {}
        used = self._used.get(node, {})
        return {name: value - used.get(name, 0) for name, value in info.allocatable.items()}

    def placeholder_gpus(self, group: GroupKey, node: str, resource: str = GPU) -> int:
        """`resource` the group's placeholder pods hold on `node` (bound, not finished)."""
        return sum(
            p.requests.get(resource, 0)
            for p in self.placeholders.values()
            if p.placeholder_for == group and p.node_name == node and p.holds_capacity
        )

    def free_gpus(self, node: str, resource: str = GPU) -> int:
        return self.free(node).get(resource, 0)


def rolling_update_hint(members: Sequence[PodInfo]) -> str:
    """When members of two ReplicaSets of one Deployment disagree: a rolling update
    (old members beside new ones) after the size changed, and its fix."""
    sets = sorted({p.replica_set for p in members if p.replica_set and p.min_available})
    deployments = {name.rsplit("-", 1)[0] for name in sets if "-" in name}
    if len(sets) < 2 or len(deployments) != 1:
        return ""
    return (
        f"; they belong to ReplicaSets {listing(sets)} of Deployment {deployments.pop()}: "
        "a rolling update keeps old members beside new ones, so set the Deployment's "
        "strategy to Recreate (spec.strategy.type: Recreate) and the old members go first"
    )
