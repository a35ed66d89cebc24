"""The data of ConfigMap `<group>-svc`: host lists, the hostfile and VC_* values.

Mounted at /etc/volcano and read as env through configMapKeyRef, so one render
serves both Volcano-style scripts and `horovodrun -np $GANG_NUM_SLOTS -H $GANG_HOROVOD_HOSTS`.
"""

from __future__ import annotations

from extender.injection import names
from extender.injection.layout import GroupLayout


def render_svc_data(layout: GroupLayout) -> dict[str, str]:
    """Every key of the ConfigMap, in a stable order.

    `<task>.host` has one FQDN per line and no trailing newline, as Volcano writes
    it, so `cat /etc/volcano/worker.host | tr "\\n" ","` gives no trailing comma.
    `hostfile` is the MPI / DeepSpeed form `<fqdn> slots=<n>`, one member a line.
    """
    members = layout.members()
    data: dict[str, str] = {}
    for task in layout.tasks:
        hosts = [member.fqdn for member in members if member.task == task.name]
        data[names.task_host_file(task.name)] = "\n".join(hosts)
        data[names.task_hosts_env(task.name)] = ",".join(hosts)
        data[names.task_num_env(task.name)] = str(task.count)
    data[names.HOSTFILE_KEY] = "".join(f"{m.fqdn} slots={m.slots}\n" for m in members)
    data[names.HOROVOD_HOSTS_KEY] = ",".join(f"{m.fqdn}:{m.slots}" for m in members)
    data[names.NUM_SLOTS_KEY] = str(sum(m.slots for m in members))
    return data
