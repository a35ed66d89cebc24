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


def _status(args: argparse.Namespace) -> int:
    from extender.kube.rawapi import KubeError, RawApi, load_api_client, path_of

    raw = RawApi(load_api_client(args.kubeconfig or _user_kubeconfig()))
    parts = ["apis", "scheduling.gang-extender.io", "v1alpha1"]
    if args.namespace:
        parts += ["namespaces", args.namespace]
    try:
        groups = raw.call("GET", path_of(*parts, "podgroups")).get("items", [])
    except KubeError as err:
        print(f"error: cannot list PodGroups: {err}", file=sys.stderr)
        return 1
    rows = [("NAMESPACE", "NAME", "PHASE", "PLACED/MIN", "RUNNING", "WAITING FOR")]
    for pg in sorted(groups, key=lambda g: (g["metadata"]["namespace"], g["metadata"]["name"])):
        status = pg.get("status") or {}
        conditions = status.get("conditions") or []
        message = next(
            (c.get("message", "") for c in conditions if c.get("type") == "Scheduled"), ""
        )
        phase = status.get("phase", "Pending")
        rows.append(
            (
                pg["metadata"]["namespace"],
                pg["metadata"]["name"],
                phase,
                f"{status.get('scheduled', 0)}/{pg['spec'].get('minMember', '?')}",
                str(status.get("running", 0)),
                "" if phase in ("Scheduled", "Running", "Succeeded") else message,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
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
    )


def _dev_down(args: argparse.Namespace) -> int:
    from extender.devcluster.devenv import dev_down

    return dev_down(Path(args.workdir))


def _demo(args: argparse.Namespace) -> int:
    from extender.devcluster.devenv import run_demo

    return run_demo(Path(args.workdir), keep=args.keep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gang-extender",
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

    dev = sub.add_parser("dev", help="a local control plane with fake GPU nodes")
    dev_sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)
    up = dev_sub.add_parser("up", help="start the local cluster, service and gang scheduler")
    up.add_argument("--workdir", default=str(DEFAULT_DEV_DIR), help="state directory")
    up.add_argument("--nodes", type=int, default=3, help="fake GPU nodes (default 3)")
    up.add_argument("--gpus", type=int, default=4, help="GPUs per node (default 4)")
    up.add_argument("--cluster-only", action="store_true", help="no extender, webhook, scheduler")
    up.add_argument("--foreground", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(func=_dev_up)
    down = dev_sub.add_parser("down", help="stop everything `dev up` started")
    down.add_argument("--workdir", default=str(DEFAULT_DEV_DIR), help="state directory")
    down.set_defaults(func=_dev_down)

    demo = sub.add_parser("demo", help="local cluster + the seed Horovod gang, end to end")
    demo.add_argument("--workdir", default=".dev/demo", help="state directory")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running")
    demo.set_defaults(func=_demo)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _args: print(f"gang-extender {__version__}") or 0)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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


if __name__ == "__main__":
    sys.exit(main())
