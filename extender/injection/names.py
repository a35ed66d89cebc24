"""Every name the job wiring derives from a group, task and index: one function each.

The webhook (which points pods at these objects), the controller (which creates
them) and the docs must agree on every name, so they are all spelled here.
Names follow Volcano's `svc`, `ssh` and `env` plugins so existing scripts keep working.
"""

from __future__ import annotations

import re

# Where the ConfigMap `<group>-svc` is mounted: Volcano's path, read by existing scripts.
VOLCANO_MOUNT_PATH = "/etc/volcano"
DEFAULT_SSH_PATH = "/root/.ssh"
DEFAULT_SSH_PORT = 22

# Pod volume names are fixed (not derived from the group) so reinvocation finds them
# by name, and a long group name cannot push them over the 63-character limit.
SVC_VOLUME = "gang-svc"
SSH_VOLUME = "gang-ssh"

# A secret volume's files are private keys: owner read/write only (0600).
SSH_DEFAULT_MODE = 0o600
# The directory inside the ssh Secret volume that holds its files (every key is an
# item under it), and the volume's subPath mounted at the pod's ssh path. The root of
# a Secret volume is kubelet's tmpfs, mode 1777, which OpenSSH's StrictModes refuses
# as the directory of authorized_keys; a directory the kubelet makes inside the
# volume is 0755 and root's, which sshd accepts (Volcano's ssh plugin does the same).
SSH_VOLUME_DIR = ".ssh"

# RFC 1123 label length limit, which spec.hostname and spec.subdomain must meet.
MAX_DNS_LABEL = 63

# Service names are RFC 1035 labels: they must start with a letter.
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

# Env names every member gets as literal values.
ENV_TASK_INDEX = "VC_TASK_INDEX"
# Volcano's older name for the same index; still read by some images.
ENV_TASK_INDEX_LEGACY = "VK_TASK_INDEX"
ENV_TASK_NAME = "VC_TASK_NAME"
# ConfigMap keys, also injected as env through configMapKeyRef.
HOROVOD_HOSTS_KEY = "GANG_HOROVOD_HOSTS"
NUM_SLOTS_KEY = "GANG_NUM_SLOTS"
HOSTFILE_KEY = "hostfile"
# The Ready members only (`<fqdn> slots=<n>`), and the scripts that read it
# (extender.injection.ready), rendered into the same ConfigMap.
READY_HOSTFILE_KEY = "ready.hostfile"
DISCOVER_HOSTS_KEY = "discover_hosts.sh"
WAIT_FOR_TASKS_KEY = "wait_for_tasks.sh"
# The ConfigMap volume's file mode: the scripts above must be executable, since
# Horovod runs `--host-discovery-script <path>` as a command. Nothing in it is secret.
SVC_VOLUME_MODE = 0o755

# A task that starts only once other tasks are Ready (extender.injection.depends).
DEPENDS_ON_ANNOTATION = "gang-extender.io/depends-on"
DEPENDS_ON_TIMEOUT_ANNOTATION = "gang-extender.io/depends-on-timeout"
WAIT_CONTAINER = "wait-for-tasks"
ENV_WAIT_TIMEOUT = "GANG_WAIT_TIMEOUT_SECONDS"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gang-extender"


def service_name(group: str) -> str:
    """The headless Service that makes member hostnames resolve."""
    return group


def svc_configmap_name(group: str) -> str:
    """The ConfigMap with host lists, the hostfile and VC_* values."""
    return f"{group}-svc"


def ssh_secret_name(group: str) -> str:
    """The Secret with the group's key pair and ssh config."""
    return f"{group}-ssh"


def hostname(group: str, task: str, index: int) -> str:
    return f"{group}-{task}-{index}"


def hostname_pattern(group: str) -> str:
    """An ssh_config pattern matching `hostname(group, task, index)` for every task and index."""
    return f"{group}-*"


def fqdn(group: str, task: str, index: int) -> str:
    """Resolvable inside the namespace: `<hostname>.<subdomain>` with the headless Service."""
    return f"{hostname(group, task, index)}.{service_name(group)}"


def task_key(task: str) -> str:
    """A task name as it appears in file names and env names: '-' becomes '_'."""
    return task.replace("-", "_")


def task_host_file(task: str) -> str:
    """`/etc/volcano/<task>.host`, one FQDN per line (Volcano's svc plugin)."""
    return f"{task_key(task)}.host"


def task_hosts_env(task: str) -> str:
    return f"VC_{task_key(task).upper()}_HOSTS"


def task_num_env(task: str) -> str:
    return f"VC_{task_key(task).upper()}_NUM"


def is_dns_1035_label(text: str) -> bool:
    return len(text) <= MAX_DNS_LABEL and bool(_DNS_1035_LABEL.match(text))
