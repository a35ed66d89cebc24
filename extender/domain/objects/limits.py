"""Limits on every size a user controls, and the helpers that keep messages short.

Pure. One tenant's objects must not cost the service (or the other tenants'
answers) more than a bounded amount: every size a pod or PodGroup sets is checked
against a limit here where it is read, and one past its limit makes the group's
spec (or the pod's membership) an error that names the limit. The limits are far
above what an honest job asks for; docs/podgroup.md#limits lists each with why.

Messages that quote what a user wrote, or list members or tasks, go through
`quoted` and `listing`, and every hold message through `clip`: kube-scheduler is
sent the same reason once per candidate node, so a reason's length multiplies by
the cluster's size in the /filter answer.
"""

from __future__ import annotations

from collections.abc import Iterable

# minMember, gang-extender.io/min-available, minCount, and the sum of task minimums.
MAX_GROUP_SIZE = 10_000
# Tasks of one group (gang-extender.io/tasks, minTaskMember).
MAX_TASKS = 64
# A task name is part of each member's hostname: a DNS label.
MAX_TASK_NAME = 63
# spec.topology.preferred (Kueue's Topology allows 16 levels; real ones use 2 to 4).
MAX_TOPOLOGY_LABELS = 16
# spec.policies entries (three events exist; each takes one action).
MAX_POLICIES = 16
# spec.maxRetry / gang-extender.io/max-retry.
MAX_RETRY = 1_000
# Any duration in seconds a user sets (scheduleTimeoutSeconds, starvationSeconds,
# podsReadyTimeoutSeconds and their annotations, depends-on-timeout-seconds): a year.
MAX_SECONDS = 365 * 24 * 3600
# gang-extender.io/ssh-path: written into every container of every member and the ssh config.
MAX_SSH_PATH = 1_024
# A hold message, as kube-scheduler receives it for each candidate node.
MAX_REASON_CHARS = 1_024
# How much of a user's value a message quotes.
QUOTED_CHARS = 80
# How many items (members, tasks, nodes) a message names before "and N more".
LISTED_ITEMS = 5
# Placements the planner tries for one gang across its topology levels (each is one
# greedy pass over the room); past it, the rest of the levels are not compared.
PLANNER_STEP_BUDGET = 256
# Task indexes past the group's size: elastic jobs run more members than their
# minimum (an index up to 4x the size, or the size + 256), never past MAX_GROUP_SIZE.
INDEX_HEADROOM = 256
INDEX_FACTOR = 4


def max_task_index(size: int) -> int:
    """The first task index refused for a group of `size` members (every index is below it)."""
    return min(MAX_GROUP_SIZE, max(size * INDEX_FACTOR, size + INDEX_HEADROOM))


def quoted(value: object) -> str:
    """`repr(value)`, cut to QUOTED_CHARS with how long it was: a user's value in a message."""
    try:
        text = repr(value)
    except ValueError:  # an int of more than 4,300 digits: Python will not print it
        return "(a number too long to show)"
    if len(text) <= QUOTED_CHARS:
        return text
    return f"{text[:QUOTED_CHARS]}... ({len(text)} characters)"


def listing(items: Iterable[str], *, limit: int = LISTED_ITEMS, sep: str = ", ") -> str:
    """The first `limit` items joined, then "and N more" for the rest."""
    shown: list[str] = []
    more = 0
    for item in items:
        if len(shown) < limit:
            shown.append(item)
        else:
            more += 1
    text = sep.join(shown)
    return f"{text}{sep}and {more} more" if more else text


def clip(message: str, limit: int = MAX_REASON_CHARS) -> str:
    """`message` if it is at most `limit` characters, else its start and how much is cut."""
    if len(message) <= limit:
        return message
    keep = limit - 48  # room for the tail below, whatever the count
    return f"{message[:keep]}... ({len(message) - keep} more characters)"


def too_big(value: int, limit: int, what: str) -> str | None:
    """Why `value` cannot stand for `what` when it is past `limit`, else None."""
    if value <= limit:
        return None
    return f"{what}={quoted(value)} is more than this service accepts: at most {limit}"
