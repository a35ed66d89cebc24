"""The shell scripts the group's ConfigMap carries next to `ready.hostfile`. Pure text.

Both run with the member's own `/bin/sh` (POSIX sh: busybox, dash and bash all
do) and find `ready.hostfile` beside themselves (`dirname "$0"`), so they read
the mounted copy the kubelet refreshes when the controller updates the ConfigMap,
and a test can run them against files in a temporary directory.

- `discover_hosts.sh [TASK...]` prints `host:slots` per Ready member (of those
  tasks, or of `$GANG_DISCOVER_TASKS`, or all): Horovod elastic's
  `--host-discovery-script` contract.
- `wait_for_tasks.sh TASK[=COUNT]...` waits, for a bounded time, until each
  task has COUNT Ready members (default: the task's member count, the
  `VC_<TASK>_NUM` file beside it); the `wait-for-tasks` init container runs it
  (extender.injection.depends).
"""

from __future__ import annotations

import shlex

# Used when neither the pod's annotation nor its PodGroup's podsReadyTimeoutSeconds
# says how long to wait: long enough for images to pull, short enough that a gang
# whose workers never come up fails in minutes, not never.
DEFAULT_WAIT_TIMEOUT_SECONDS = 300
# How often the wait re-reads ready.hostfile. The kubelet refreshes a ConfigMap
# volume about once a minute, so polling faster would gain nothing.
WAIT_INTERVAL_SECONDS = 2

# The message a wait that timed out ends with (quoted in docs/webhook.md).
WAIT_GAVE_UP = "wait-for-tasks: gave up after"

_DISCOVER_HOSTS_TEMPLATE = """\
#!/bin/sh
# gang-extender: the Ready members of group @GROUP@, one host:slots a line, as
# Horovod elastic's --host-discovery-script expects. Reads ready.hostfile beside
# this script, which the kubelet refreshes when gang-extender updates the ConfigMap.
# Usage: discover_hosts.sh [TASK...]: only those tasks' members (default: the
# tasks in $GANG_DISCOVER_TASKS, comma-separated; when empty, every member).
group=@QUOTED_GROUP@
hostfile="$(dirname "$0")/ready.hostfile"
if [ $# -gt 0 ]; then
  tasks="$*"
else
  tasks=$(printf '%s' "${GANG_DISCOVER_TASKS:-}" | tr ',' ' ')
fi
if [ ! -r "$hostfile" ]; then
  echo "discover_hosts.sh: $hostfile is missing; gang-extender writes it into the group's ConfigMap" >&2
  exit 1
fi
listed() {
  [ -z "$tasks" ] && return 0
  for task in $tasks; do
    case $1 in
      "$group-$task-"*".$group")
        index=${1#"$group-$task-"}
        case ${index%".$group"} in
          '' | *[!0-9]*) ;;
          *) return 0 ;;
        esac ;;
    esac
  done
  return 1
}
while read -r host slots rest || [ -n "$host" ]; do
  case $host in
    '' | '#'*) continue ;;
  esac
  if listed "$host"; then
    echo "$host:${slots#slots=}"
  fi
done < "$hostfile"
"""

_WAIT_FOR_TASKS_TEMPLATE = """\
#!/bin/sh
# gang-extender: wait until tasks of group @GROUP@ have enough Ready members.
# Usage: wait_for_tasks.sh TASK[=COUNT]...
# COUNT defaults to the task's member count (the VC_<TASK>_NUM file beside this
# script). Gives up after $GANG_WAIT_TIMEOUT_SECONDS (default @TIMEOUT@) seconds
# with exit status 1; a usage error exits with 2.
group=@QUOTED_GROUP@
dir=$(dirname "$0")
timeout=${GANG_WAIT_TIMEOUT_SECONDS:-@TIMEOUT@}
interval=${GANG_WAIT_INTERVAL_SECONDS:-@INTERVAL@}
say() { echo "wait-for-tasks: $*" >&2; }
case "$timeout:$interval" in
  *[!0-9:]* | :* | *:)
    say "GANG_WAIT_TIMEOUT_SECONDS ('$timeout') and GANG_WAIT_INTERVAL_SECONDS ('$interval') must be whole numbers of seconds"
    exit 2 ;;
esac
[ "$interval" -ge 1 ] || interval=1
if [ $# -eq 0 ]; then
  say "usage: $0 TASK[=COUNT]..."
  exit 2
fi
waited=0
last=''
while :; do
  short=''
  for want in "$@"; do
    task=${want%%=*}
    need=${want#"$task"}
    need=${need#=}
    if [ -z "$need" ]; then
      key=$(printf '%s' "$task" | tr 'abcdefghijklmnopqrstuvwxyz-' 'ABCDEFGHIJKLMNOPQRSTUVWXYZ_')
      need=$(cat "$dir/VC_${key}_NUM" 2>/dev/null)
    fi
    have=$(grep -c "^$group-$task-[0-9][0-9]*\\.$group slots=" "$dir/ready.hostfile" 2>/dev/null)
    have=${have:-0}
    case $need in
      '' | *[!0-9]*) short="$short $task $have/?" ;;
      *) [ "$have" -ge "$need" ] || short="$short $task $have/$need" ;;
    esac
  done
  if [ -z "$short" ]; then
    say "group $group: $* Ready"
    exit 0
  fi
  if [ "$short" != "$last" ]; then
    say "group $group: waiting for Ready members (task ready/needed):$short"
    last=$short
  fi
  if [ "$waited" -ge "$timeout" ]; then
    say "gave up after ${timeout}s: group $group has too few Ready members (task ready/needed):$short"
    exit 1
  fi
  sleep "$interval"
  waited=$((waited + interval))
done
"""


def discover_hosts_script(group: str) -> str:
    """`discover_hosts.sh` for `group`: the group names the hosts of each task."""
    return _render(_DISCOVER_HOSTS_TEMPLATE, group)


def wait_for_tasks_script(group: str) -> str:
    """`wait_for_tasks.sh` for `group`: the group names the hosts it counts."""
    return _render(_WAIT_FOR_TASKS_TEMPLATE, group)


def _render(template: str, group: str) -> str:
    return (
        template.replace("@QUOTED_GROUP@", shlex.quote(group))
        .replace("@GROUP@", group)
        .replace("@TIMEOUT@", str(DEFAULT_WAIT_TIMEOUT_SECONDS))
        .replace("@INTERVAL@", str(WAIT_INTERVAL_SECONDS))
    )
