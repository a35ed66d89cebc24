"""`PodMembership`: what a pod of a group asks for, validated. Pure data.

Made by `extender.injection.admission.read_membership`; read by the admission steps
and by every injector (`extender.injection.injectors`).
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.injection.depends import Dependency
from extender.injection.layout import DeclaredLayout


@dataclass(frozen=True)
class PodMembership:
    """What a pod of a group asks for, validated (except the index, which may be unknown)."""

    namespace: str
    group: str
    task: str
    explicit_index: int | None
    layout: DeclaredLayout | None
    ssh_path: str
    # gang-extender.io/depends-on: the tasks to wait for before starting (None: none).
    dependency: Dependency | None = None

    def task_limit(self) -> int | None:
        """How many members the declared layout allows for this task (None: no limit)."""
        return self.layout.counts[self.task] if self.layout is not None else None

    def env_tasks(self) -> list[str]:
        """Tasks whose VC_<TASK>_* env the pod gets: the whole layout, or its own task."""
        return list(self.layout.counts) if self.layout is not None else [self.task]
