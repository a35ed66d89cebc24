"""`gang-extender` command line: serve, status, dev up/down, demo, version."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from extender import __version__

DEFAULT_DEV_DIR = Path(os.environ.get("GANG_DEV_DIR", ".dev/cluster"))


# Usage or configuration error: the exit status of argparse itself.
EXIT_USAGE = 2

# The flag of each setting `serve` takes from the command line (others are env-only).
SERVE_FLAGS = (
    "kubeconfig",
    "bind_address",
    "extender_port",
    "webhook_port",
    "metrics_port",
    "tls_cert",
    "tls_key",
    "tls_dir",
    "policy",
    "log_level",
    "leader_elect",
    "lease_namespace",
    "bind_barrier_timeout_seconds",
    "webhook_config_name",
)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _setting_source(field: str, from_flags: dict[str, Any]) -> str:
    if field in from_flags:
        return "--" + field.replace("_", "-")
    return "GANG_" + field.upper()


def _settings_error(err: Exception, from_flags: dict[str, Any]) -> str:
    """One line naming each bad setting where it came from (flag or GANG_* variable)."""
    from pydantic import ValidationError

    if isinstance(err, ValidationError):
        problems = []
        for e in err.errors():
            field = str(e["loc"][0]) if e["loc"] else ""
            source = _setting_source(field, from_flags) if field else "settings"
            message = str(e["msg"]).removeprefix("Value error, ")
            if e.get("type") == "extra_forbidden":
                problems.append(f"{source}: not a setting")
            elif "input" in e and not isinstance(e["input"], dict):
                problems.append(f"{source}={e['input']!r}: {message}")
            else:
                problems.append(f"{source}: {message}")
        return "invalid setting: " + "; ".join(problems)
    # pydantic-settings could not decode a variable (a list setting takes JSON).
    match = re.search(r'field "(\w+)"', str(err))
    if match:
        return (
            f"invalid setting: {_setting_source(match.group(1), from_flags)}: cannot be "
            f"parsed; list settings take JSON, e.g. GANG_TLS_HOSTS='[\"localhost\"]'"
        )
    return f"invalid setting: {err}"


def _serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from extender.config import Settings
    from extender.domain.policy import PolicyError
    from extender.policy_file import load_policy
    from extender.service import StartupError, serve

    overrides: dict[str, Any] = {}
    for field in SERVE_FLAGS:
        value = getattr(args, field, None)
        if value is not None:
            overrides[field] = value
    try:
        settings = Settings(**overrides)
    except (ValidationError, SettingsError) as err:
        return _fail(_settings_error(err, overrides))
    if bool(settings.tls_cert) != bool(settings.tls_key):
        return _fail("--tls-cert and --tls-key go together")
    try:
        load_policy(settings.policy)
    except PolicyError as err:
        return _fail(str(err))
    try:
        serve(settings)
    except StartupError as err:
        return _fail(str(err))
    return 0


# `gang-extender status`: SOURCE says where a group's size comes from.
SOURCE_OURS = "gang-extender"  # a scheduling.gang-extender.io PodGroup (its status is ours)
# A scheduling.x-k8s.io / scheduling.volcano.sh PodGroup (read; the service writes their
# status in their own schema, docs/podgroup.md#migrating-from-volcano-or-scheduler-plugins).
SOURCE_COSCHEDULING = "scheduler-plugins"
SOURCE_VOLCANO = "volcano"
SOURCE_PODS = "pods"  # no PodGroup: only the members' group label or annotation
# A scheduling.k8s.io PodGroup, or 1.35's Workload (Workload API; read, never written).
SOURCE_UPSTREAM = "kubernetes"
# The versions of scheduling.k8s.io PodGroups `status` asks for, newest first.
UPSTREAM_PODGROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
PLACED_PHASES = ("Scheduled", "Running", "Succeeded")
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
NOT_QUEUED = "-"  # the QUEUE cell of a group that is not held (placed, or none pending)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name", ""))


def _event_time(event: dict[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


_GANG_MESSAGE = re.compile(r"\bgang [^\s/]+/[^\s:]+: .*?(?=\. |\.?$)")


def _gang_message(text: str) -> str:
    """The `gang <ns>/<name>: ...` message inside kube-scheduler's FailedScheduling text."""
    found = _GANG_MESSAGE.search(text)
    return found.group(0) if found else text


def status_rows(
    ours: list[dict[str, Any]],
    coscheduling: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    waiting_events: list[dict[str, Any]],
    *,
    upstream: list[dict[str, Any]] | None = None,
    workloads: list[dict[str, Any]] | None = None,
) -> list[tuple[str, ...]]:
    """One row per group the service reads, whatever declares it (pure, for the table).

    A gang-extender PodGroup carries its status; for the others (a Volcano or
    scheduler-plugins PodGroup, both in `coscheduling`, Volcano's first as the
    service reads them; Kubernetes' PodGroups, `upstream`; Kubernetes 1.35's
    Workloads, `workloads`, for the gangs members name in spec.workloadRef; or
    members naming a group that has no PodGroup) the counts come from the member
    pods and the reason from their latest `GangWaiting` Event.
    """
    from extender.domain.membership import (
        SCHEDULER_NAME,
        GroupKey,
        MembershipError,
        WorkloadRef,
        group_name,
        min_available,
        workload_ref,
    )
    from extender.domain.model import PodInfo, upstream_podgroup_spec, upstream_workload_spec
    from extender.domain.status import MemberCounts, other_scheduler_message

    members: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        try:
            name = group_name(meta, pod.get("spec"))
        except MembershipError:
            continue  # claims two groups: its GangWaiting Warning says so
        if name is not None:
            members.setdefault((_key(pod)[0], name), []).append(pod)
    # Per member pod, its latest (rank, time, message): a GangWaiting Event (rank 1)
    # wins over kube-scheduler's FailedScheduling (rank 0), which carries the same
    # gang message (cut out of its own text) or, when kube-scheduler's filters
    # reject the pod before gang-extender sees it, their reason.
    latest: dict[tuple[str, str], tuple[int, str, str]] = {}
    for event in waiting_events:
        involved = event.get("involvedObject") or {}
        pod_key = (str(involved.get("namespace", "")), str(involved.get("name", "")))
        rank = 1 if event.get("reason") == "GangWaiting" else 0
        said = (rank, _event_time(event), _gang_message(str(event.get("message", ""))))
        if pod_key not in latest or said[:2] >= latest[pod_key][:2]:
            latest[pod_key] = said

    rows: dict[tuple[str, str], tuple[str, ...]] = {}
    for pg in ours:
        status = pg.get("status") or {}
        message = next(
            (
                str(c.get("message", ""))
                for c in status.get("conditions") or []
                if c.get("type") == "Scheduled"
            ),
            "",
        )
        phase = str(status.get("phase", "Pending"))
        # The Scheduled condition's message in every phase, as `kubectl get -o wide` shows it.
        rows[_key(pg)] = (
            *_key(pg),
            phase,
            f"{status.get('scheduled', 0)}/{(pg.get('spec') or {}).get('minMember', '?')}",
            str(status.get("running", 0)),
            SOURCE_OURS,
            message,
        )

    def from_pods(key: tuple[str, str], source: str, min_member: int | None) -> tuple[str, ...]:
        mine = [
            p
            for p in members.get(key, [])
            if (p.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME
        ]
        # The service's own phase ladder (domain/status.py), from the same counts.
        counts = MemberCounts.of([PodInfo.from_api(p) for p in mine])
        placed, running = counts.scheduled, counts.running
        phase = counts.phase(min_member)
        said = [
            latest[(key[0], str((p.get("metadata") or {}).get("name", "")))]
            for p in mine
            if (key[0], str((p.get("metadata") or {}).get("name", ""))) in latest
        ]
        reason = max(said)[2] if said else ""
        # Pods of the group another scheduler places: no Event of ours says so.
        foreign = [
            PodInfo.from_api(p)
            for p in members.get(key, [])
            if (p.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME
            and not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if foreign and (min_member is None or len(mine) < min_member):
            reason = other_scheduler_message(GroupKey(*key), foreign)
        return (
            *key,
            phase,
            f"{placed}/{'?' if min_member is None else min_member}",
            str(running),
            source,
            "" if phase in PLACED_PHASES else reason,
        )

    for pg in coscheduling:
        if _key(pg) not in rows:  # the service reads ours first
            size = (pg.get("spec") or {}).get("minMember")
            volcano = str(pg.get("apiVersion", "")).startswith("scheduling.volcano.sh/")
            if volcano:  # Volcano's minMember is omitempty: none is 0, no minimum
                size = max(1, size or 0) if size is None or isinstance(size, int) else None
            rows[_key(pg)] = from_pods(
                _key(pg),
                SOURCE_VOLCANO if volcano else SOURCE_COSCHEDULING,
                int(size) if size is not None else None,
            )
    for pg in upstream or []:
        if _key(pg) not in rows:  # as the service: ours, then scheduler-plugins', then these
            spec = upstream_podgroup_spec(pg)
            rows[_key(pg)] = from_pods(
                _key(pg), SOURCE_UPSTREAM, None if spec.error else spec.min_member
            )

    def ref_of(pod: dict[str, Any]) -> WorkloadRef | None:
        try:
            return workload_ref(pod.get("spec"))
        except MembershipError:
            return None  # its GangWaiting Warning says what is wrong with it

    by_workload = {_key(w): w for w in workloads or []}
    for key, group in members.items():
        if key in rows:
            continue
        # As the service: a gang its members name in spec.workloadRef (1.35) is sized by
        # the Workload's pod group entry, when that Workload exists.
        ref = next((r for p in group if (r := ref_of(p)) is not None and r.group == key[1]), None)
        workload = by_workload.get((key[0], ref.workload)) if ref is not None else None
        if ref is not None and workload is not None:
            spec = upstream_workload_spec(workload, ref)
            rows[key] = from_pods(key, SOURCE_UPSTREAM, None if spec.error else spec.min_member)
            continue
        sizes = set()
        for pod in group:
            try:
                size = min_available(pod.get("metadata") or {})
            except MembershipError:
                continue
            if size is not None:
                sizes.add(size)
        rows[key] = from_pods(key, SOURCE_PODS, max(sizes) if sizes else None)
    queued = _queue_columns(rows, members)
    return [
        STATUS_HEADER,
        *((*rows[key][:-1], *queued[key], rows[key][-1]) for key in sorted(rows)),
    ]


def _queue_columns(
    rows: dict[tuple[str, str], tuple[str, ...]],
    members: dict[tuple[str, str], list[dict[str, Any]]],
) -> dict[tuple[str, str], tuple[str, str]]:
    """Per group, (QUEUE, PRIORITY): its place among the held gangs, in the order the
    service plans them (domain/queue.py: pod priority, then oldest member), and its
    priority. Held: Pending with a member of this scheduler not bound yet."""
    from extender.domain.membership import SCHEDULER_NAME, GroupKey
    from extender.domain.model import PodInfo
    from extender.domain.queue import queue_order, rank_of

    ranks = {}
    held = []
    for key in rows:
        mine = [
            PodInfo.from_api(p)
            for p in members.get(key, [])
            if (p.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME
        ]
        active = [p for p in mine if not p.deleting and p.phase not in ("Succeeded", "Failed")]
        ranks[key] = rank_of(GroupKey(*key), active)
        if rows[key][2] == "Pending" and any(not p.is_bound and not p.gated for p in active):
            held.append(ranks[key])
    place = {(r.key.namespace, r.key.name): i for i, r in enumerate(queue_order(held), 1)}
    return {
        key: (str(place[key]) if key in place else NOT_QUEUED, str(ranks[key].priority))
        for key in rows
    }


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last one (free text) is not padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]).rstrip()
        for row in rows
    )


def _status(args: argparse.Namespace) -> int:
    from extender.kube.rawapi import KubeError, RawApi, load_api_client, path_of

    raw = RawApi(load_api_client(args.kubeconfig or _user_kubeconfig()))
    scope = ["namespaces", args.namespace] if args.namespace else []

    def items(*prefix: str, resource: str, **query: str) -> list[dict[str, Any]] | None:
        """The list, or None when the API server does not serve that resource."""
        try:
            found = raw.call("GET", path_of(*prefix, *scope, resource), query=query or None)
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return list(found.get("items", []))

    def upstream_podgroups() -> list[dict[str, Any]] | None:
        """Kubernetes' PodGroups in the first version served; None when none is (or when
        this user may not list them: they are an extra, not what `status` is about)."""
        for version in UPSTREAM_PODGROUP_VERSIONS:
            try:
                found = items("apis", "scheduling.k8s.io", version, resource="podgroups")
            except KubeError as err:
                if err.status == 403:
                    return None
                raise
            if found is not None:
                return found
        return None

    def upstream_workloads() -> list[dict[str, Any]] | None:
        """Kubernetes 1.35's v1alpha1 Workloads; None where not served (1.36 on) or not
        listable by this user, as for Kubernetes' PodGroups."""
        try:
            return items("apis", "scheduling.k8s.io", "v1alpha1", resource="workloads")
        except KubeError as err:
            if err.status == 403:
                return None
            raise

    try:
        ours = items("apis", "scheduling.gang-extender.io", "v1alpha1", resource="podgroups")
        theirs = items("apis", "scheduling.x-k8s.io", "v1alpha1", resource="podgroups")
        volcano = items("apis", "scheduling.volcano.sh", "v1beta1", resource="podgroups")
        upstream = upstream_podgroups()
        workloads = upstream_workloads()
        pods = items("api", "v1", resource="pods") or []
        events = [
            *(items("api", "v1", resource="events", fieldSelector="reason=GangWaiting") or []),
            *(items("api", "v1", resource="events", fieldSelector="reason=FailedScheduling") or []),
        ]
    except KubeError as err:
        print(f"error: cannot list pod groups: {err}", file=sys.stderr)
        return 1
    if ours is None:
        print(
            "warning: the API server does not serve podgroups.scheduling.gang-extender.io; "
            "install gang-extender (kubectl apply -k deploy/, docs/deploy.md)",
            file=sys.stderr,
        )
    foreign = [*(volcano or []), *(theirs or [])]
    print(
        format_table(
            status_rows(ours or [], foreign, pods, events, upstream=upstream, workloads=workloads)
        )
    )
    return 0


def _user_kubeconfig() -> str | None:
    """$KUBECONFIG (its first existing file) or ~/.kube/config; None: in-cluster config."""
    candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates.append(str(Path.home() / ".kube" / "config"))
    return next((p for p in candidates if Path(p).expanduser().is_file()), None)


def _dev_up(args: argparse.Namespace) -> int:
    from extender.devcluster.devenv import dev_up

    return dev_up(
        Path(args.workdir),
        nodes=args.nodes,
        gpus=args.gpus,
        with_stack=not args.cluster_only,
        foreground=args.foreground,
        real_nodes=args.real_nodes,
        real_gpus=args.real_gpus,
    )


def _dev_down(args: argparse.Namespace) -> int:
    from extender.devcluster.devenv import dev_down

    return dev_down(Path(args.workdir))


def _demo(args: argparse.Namespace) -> int:
    if args.real_nodes:
        from extender.devcluster.demo_real import run_real_demo
        from extender.devcluster.devenv import real_nodes_problem

        problem = real_nodes_problem(args.real_nodes)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        return run_real_demo(Path(args.workdir), nodes=args.real_nodes)

    from extender.devcluster.devenv import run_demo

    return run_demo(Path(args.workdir), keep=args.keep)


def build_parser(prog: str = "gang-extender") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Gang scheduling for GPU jobs beside the stock kube-scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"gang-extender {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the extender, webhook and controller")
    serve.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster)")
    serve.add_argument("--bind-address", help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--extender-port", type=int, help="HTTPS extender port (default 8443)")
    serve.add_argument("--webhook-port", type=int, help="HTTPS webhook port (default 9443)")
    serve.add_argument("--metrics-port", type=int, help="HTTP metrics/health port (default 8080)")
    serve.add_argument("--tls-cert", type=Path, help="serving certificate (PEM)")
    serve.add_argument("--tls-key", type=Path, help="serving key (PEM)")
    serve.add_argument("--tls-dir", type=Path, help="where the self-managed CA and cert live")
    serve.add_argument("--policy", type=Path, help="placement policy file (policies/*.yaml)")
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    serve.add_argument(
        "--leader-elect", action="store_true", default=None, help="elect a leader on a Lease"
    )
    serve.add_argument("--lease-namespace", help="namespace of the leader Lease")
    serve.add_argument(
        "--bind-barrier-timeout-seconds", type=float, help="bind barrier timeout (default 30)"
    )
    serve.add_argument(
        "--webhook-config-name",
        help="MutatingWebhookConfiguration to keep the CA bundle of (default gang-extender)",
    )
    serve.set_defaults(func=_serve)

    status = sub.add_parser("status", help="list pod groups: phase, placed/min, waiting reason")
    status.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
    status.add_argument("-n", "--namespace", help="only this namespace")
    # A table piped into `head` should end quietly: die on a closed pipe like a Unix tool.
    status.set_defaults(func=_status, default_sigpipe=True)

    dev = sub.add_parser("dev", help="a local control plane with fake (and real) GPU nodes")
    dev_sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)
    up = dev_sub.add_parser("up", help="start the local cluster, service and gang scheduler")
    up.add_argument("--workdir", default=str(DEFAULT_DEV_DIR), help="state directory")
    up.add_argument("--nodes", type=int, default=3, help="fake GPU nodes (default 3)")
    up.add_argument("--gpus", type=int, default=4, help="GPUs per node (default 4)")
    up.add_argument("--cluster-only", action="store_true", help="no extender, webhook, scheduler")
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="real nodes beside the fake ones: containerd + kubelet each (root; docs/real-nodes.md)",
    )
    up.add_argument("--real-gpus", type=int, default=2, help="fake GPUs per real node (default 2)")
    up.add_argument("--foreground", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(func=_dev_up)
    down = dev_sub.add_parser("down", help="stop everything `dev up` started")
    down.add_argument("--workdir", default=str(DEFAULT_DEV_DIR), help="state directory")
    down.set_defaults(func=_dev_down)

    demo = sub.add_parser("demo", help="local cluster + the seed Horovod gang, end to end")
    demo.add_argument("--workdir", default=".dev/demo", help="state directory")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running")
    demo.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="run the seed job for real (mpirun over SSH) on this many real nodes (root)",
    )
    demo.set_defaults(func=_demo)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _args: print(f"gang-extender {__version__}") or 0)
    return parser


def main(argv: list[str] | None = None, prog: str = "gang-extender") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    # Only for printing commands: a server with SIGPIPE at its default dies silently
    # (exit -13) the first time it writes to a connection its peer has closed.
    if getattr(args, "default_sigpipe", False):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    result = args.func(args)
    return int(result or 0)


def kubectl_plugin() -> int:
    """`kubectl-gang`: kubectl runs it for `kubectl gang ...` with the words after `gang`.

    So `kubectl gang status -n ns` is `gang-extender status -n ns`; usage and
    errors name the command as the user typed it.
    """
    return main(sys.argv[1:], prog="kubectl gang")


if __name__ == "__main__":
    sys.exit(main())
