"""Pure scheduling core: no I/O, no kubernetes/fastapi/prometheus imports.

Subpackages by concern (highest first; the `domain-layers` contract in
pyproject.toml keeps each importing only those below it; `|` separates siblings):
 - status/: foreign_status, status
 - lifecycle/: lifecycle, lifecycle_policy
 - gang/: core_api, gang, gang_barrier, gang_filter, gang_planning, gang_watch
 - starvation/: gang_starvation, placeholders, reservations
 - queue/: gang_queue, held_queue
 - preemption/: gang_preemption, preemption
 - failover/: gang_failover, recovery
 - state/: decisions, gang_room, gang_state
 - planning/: node_fill, node_fit, node_order, planner, queue, restrictions, scoring, selection, shortfalls
 - cluster/: fences, foreign_podgroups, ledger, snapshot
 - devices/: DRA devices (ResourceSlices, DeviceClasses, claims)
 - objects/: group_spec, limits, membership, model, policy, quantity

The gang core's decision order is numbered at the top of gang/gang.py.
"""
