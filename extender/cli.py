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

#: The example jobs `demo --real-nodes` runs (extender.devcluster.demo_jobs.JOB_KEYS,
#: named here so that building the parser imports no cluster code).
REAL_DEMO_JOBS = ("horovod", "deepspeed", "mpijob")

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
    from extender.domain.objects.policy import PolicyError
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


def _status(args: argparse.Namespace) -> int:
    """Read (extender/kube/status_reads.py), compute (status_report), print (status_view)."""
    from datetime import UTC, datetime

    from extender import status_view
    from extender.kube.status_reads import StatusReader, StatusReadError, connect
    from extender.status_report import SERVICE_LEASE, StatusObjects, group_rows, service_silence

    warned: list[str] = []

    def render() -> list[str]:
        found = reader.read(SERVICE_LEASE, nodes=args.output == "wide" or bool(args.group))
        if found["ours"] is None and not warned:
            warned.append("crd")
            print(
                "warning: the API server does not serve podgroups.scheduling.gang-extender.io; "
                "install gang-extender (kubectl apply -k deploy/, docs/deploy.md)",
                file=sys.stderr,
            )
        objects = StatusObjects(now=datetime.now(UTC), **{**found, "ours": found["ours"] or []})
        rows = group_rows(objects)
        silence = service_silence(objects)
        if args.group:
            rows = [r for r in rows if r.name == args.group]
            if not rows:
                where = f"namespace {args.namespace}" if args.namespace else "any namespace"
                raise StatusReadError(
                    f"no pod group {args.group} in {where} "
                    f"(`{args.prog} status{' -n ' + args.namespace if args.namespace else ''}` lists them)"
                )
        if args.output == "json":
            return status_view.as_json(rows, silence).splitlines()
        if args.output == "yaml":
            import yaml

            return yaml.safe_dump(status_view.as_data(rows, silence), sort_keys=False).splitlines()
        if silence and not args.group:
            print(f"warning: {silence}", file=sys.stderr)
        if args.group:
            return "\n\n".join(status_view.detail(r, objects) for r in rows).splitlines()
        if args.output == "wide":
            return status_view.wide(rows, objects).splitlines()
        return status_view.table(rows).splitlines()

    if args.all_namespaces:
        args.namespace = None
    try:
        raw, where = connect(args.kubeconfig)
        reader = StatusReader(raw, where, args.namespace)
        if not args.watch:
            print("\n".join(render()))
            return 0
        return watch(
            render, args.watch_interval, table=args.output in (None, "wide") and not args.group
        )
    except StatusReadError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def watch(
    render: Any,
    interval: float,
    *,
    table: bool,
    sleep: Any = None,
    ticks: int | None = None,
) -> int:
    """Print `render()`'s lines, then, every `interval` seconds, what changed: the
    table's changed rows (as `kubectl get -w`), or a whole other output again. Ends
    on Ctrl-C (exit 0), or after `ticks` renders (tests)."""
    import time

    pause = sleep or time.sleep
    last: list[str] = []
    done = 0
    try:
        while ticks is None or done < ticks:
            lines = render()
            if not last:
                print("\n".join(lines), flush=True)
            elif table:
                seen = set(last[1:])
                changed = [line for line in lines[1:] if line not in seen]
                if changed:
                    print("\n".join(changed), flush=True)
            elif lines != last:
                print("\n" + "\n".join(lines), flush=True)
            last = lines
            done += 1
            if ticks is None or done < ticks:
                pause(interval)
    except KeyboardInterrupt:
        pass
    return 0


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
        real_gpus_by=args.real_gpus_by,
        kueue=args.kueue,
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
        return run_real_demo(
            Path(args.workdir),
            nodes=args.real_nodes,
            jobs=tuple(args.real_job) if args.real_job else None,
        )

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

    status = sub.add_parser(
        "status",
        help="list pod groups: phase, placed/min, waiting reason",
        description="Every pod group, or one (GROUP): phase, placed/min, what it waits for.",
    )
    status.add_argument("group", nargs="?", help="one group: its members, nodes and conditions")
    status.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG or ~/.kube/config)")
    status.add_argument("-n", "--namespace", help="only this namespace")
    status.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (the default)"
    )
    status.add_argument(
        "-o",
        "--output",
        choices=("wide", "json", "yaml"),
        help="wide: nodes, and the GPUs of a held group's candidate nodes and who holds them",
    )
    status.add_argument(
        "-w", "--watch", action="store_true", help="print again what changes, until Ctrl-C"
    )
    status.add_argument("--watch-interval", type=float, default=2.0, help=argparse.SUPPRESS)
    status.set_defaults(prog=prog)
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
    up.add_argument(
        "--real-gpus-by",
        choices=("device-plugin", "dra", "both"),
        default="device-plugin",
        help="how real nodes serve their GPUs: a device plugin (nvidia.com/gpu), a DRA "
        "kubelet plugin (DeviceClass gpu.example.com), or both (docs/real-nodes.md)",
    )
    up.add_argument(
        "--kueue",
        action="store_true",
        help="run Kueue too, with LocalQueue `gpus` in namespace default (docs/deploy.md)",
    )
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
        help="run the example jobs for real (mpirun over SSH) on this many real nodes (root)",
    )
    demo.add_argument(
        "--real-job",
        action="append",
        choices=REAL_DEMO_JOBS,
        help="with --real-nodes: only this example job (repeatable; default: all, in order)",
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
