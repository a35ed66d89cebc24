"""The host-side resources of local real nodes: set up, and taken down to nothing.

Everything real nodes add to this machine is recorded in a manifest
(``<workdir>/real-nodes.json``) *before* it is created, so :func:`teardown`
can remove it all even after the process that made it was killed:
processes (containerd shims and container processes escape every process
group), mounts, network namespaces, bridges, ``lo`` addresses, the FORWARD
chain, cgroups, and the slot claim under ``/run/gang-extender``.
Shared host state (``net.ipv4.ip_forward``, the FORWARD chain) is restored or
removed when the last slot on the host is released.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from extender.devcluster.node_commands import BRIDGE_PREFIX, FORWARD_CHAIN, MAX_SLOTS

RUN_ROOT = Path("/run/gang-extender")
CGROUP_V1 = Path("/sys/fs/cgroup")
SYSCTL = Path("/proc/sys")
IP_FORWARD = "net/ipv4/ip_forward"
#: Host settings real nodes change: ip_forward (routing between the pod bridges) and
#: what kubelet sets at start-up (its "kernel tunables"). Saved before the first
#: slot is claimed and written back when the last is released.
CHANGED_SYSCTLS = (
    IP_FORWARD,
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: Paths kubelet and containerd create at fixed places whatever their config says
#: (kubelet's device plugin socket dir, its container log links, the shims' sockets):
#: removed with the last slot if they were not there before the first.
FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/run/containerd",
    "/var/lib/cni",  # the CNI library caches results there
)
HOST_SAVED = RUN_ROOT / "host.before.json"
CONTAINER_LOG_LINKS = Path("/var/log/containers")
SLOT_OWNER = "owner"


class HostError(RuntimeError):
    """A host command that set up a real node failed."""


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 60) -> str:
    """Run a command; its stdout. On failure (with ``check``) HostError with stderr."""
    result = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and result.returncode != 0:
        raise HostError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


@dataclass
class Manifest:
    """What one cluster's real nodes put on this host."""

    slot: int
    run_dir: str
    node_dirs: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    cgroup_roots: list[str] = field(default_factory=list)
    containerd_sockets: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Manifest | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


# ------------------------------------------------------------------ the slot claim


def claim_slot(owner: Path) -> int:
    """The first free slot on this host, claimed by creating ``/run/gang-extender/s<N>``."""
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    for slot in range(MAX_SLOTS):
        path = slot_dir(slot)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / SLOT_OWNER).write_text(str(owner))
        return slot
    raise HostError(
        f"all {MAX_SLOTS} real-node slots in {RUN_ROOT} are taken: "
        "`gang-extender dev down` the clusters you no longer use"
    )


def slot_dir(slot: int) -> Path:
    return RUN_ROOT / f"s{slot}"


def _slots_in_use() -> list[Path]:
    return sorted(p for p in RUN_ROOT.glob("s[0-9]*") if p.is_dir()) if RUN_ROOT.is_dir() else []


# ------------------------------------------------------------------ set up


def add_lo_addresses(addresses: Iterable[str]) -> None:
    for address in addresses:
        out = run(["ip", "-o", "addr", "show", "dev", "lo"])
        if f" {address}/32 " not in out:
            run(["ip", "addr", "add", f"{address}/32", "dev", "lo"])


def succeeds(argv: Sequence[str], timeout: float = 60) -> bool:
    """Whether a command exits 0 (its output dropped): for checks like `iptables -C`."""
    return (
        subprocess.run(
            list(argv), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        ).returncode
        == 0
    )


def enable_forwarding() -> None:
    """Route between the pod bridges, and keep pod traffic on them (no way out)."""
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    if not HOST_SAVED.exists():
        saved = {
            "sysctls": {
                key: (SYSCTL / key).read_text().strip()
                for key in CHANGED_SYSCTLS
                if (SYSCTL / key).exists()
            },
            "absent": [p for p in FIXED_PATHS if not os.path.lexists(p)],
        }
        HOST_SAVED.write_text(json.dumps(saved))
    (SYSCTL / IP_FORWARD).write_text("1\n")
    bridges = f"{BRIDGE_PREFIX}+"
    for iptables in ("iptables", "ip6tables"):
        if not succeeds([iptables, "-w", "-n", "-L", FORWARD_CHAIN]):
            run([iptables, "-w", "-N", FORWARD_CHAIN])
            run([iptables, "-w", "-A", FORWARD_CHAIN, "-i", bridges, "-o", bridges, "-j", "ACCEPT"])
            run([iptables, "-w", "-A", FORWARD_CHAIN, "-i", bridges, "-j", "DROP"])
            run([iptables, "-w", "-A", FORWARD_CHAIN, "-o", bridges, "-j", "DROP"])
        if not succeeds([iptables, "-w", "-C", "FORWARD", "-j", FORWARD_CHAIN]):
            run([iptables, "-w", "-I", "FORWARD", "1", "-j", FORWARD_CHAIN])


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (and the v2 one of a hybrid host)."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    found = []
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and parts[2] in ("cgroup", "cgroup2"):
            found.append(Path(parts[1]))
    return found


def make_cgroup_root(name: str) -> None:
    """``name`` in every hierarchy; kubelet refuses a cgroupRoot that does not exist."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / name.lstrip("/")
        path.mkdir(exist_ok=True)
        if (hierarchy / "cpuset.cpus").exists():
            # A new cpuset starts empty and takes no process until given cpus and mems.
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((hierarchy / knob).read_text())


# ------------------------------------------------------------------ tear down


def _pids_in_cgroup(path: Path) -> set[int]:
    pids: set[int] = set()
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(p) for p in procs.read_text().split())
    return pids


def _pids_mentioning(needles: Sequence[str]) -> set[int]:
    """Processes whose command line names one of ``needles`` (our shims, say)."""
    found: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmdline for n in needles):
            found.add(int(proc.name))
    return found


def kill_leftovers(manifest: Manifest, grace: float = 5) -> None:
    """SIGKILL processes left in our cgroups, and shims of our containerds."""
    deadline = time.monotonic() + grace
    while True:
        pids = _pids_mentioning([manifest.run_dir, *manifest.containerd_sockets])
        for root in manifest.cgroup_roots:
            for hierarchy in cgroup_hierarchies():
                pids |= _pids_in_cgroup(hierarchy / root.lstrip("/"))
        pids.discard(os.getpid())
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def unmount_under(paths: Iterable[str]) -> None:
    """Every mount at or below one of ``paths``, deepest first (lazily if busy)."""
    prefixes = [str(Path(p)) for p in paths]
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    targets = []
    for line in mountinfo:
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            targets.append(point)
    for point in sorted(set(targets), key=lambda p: -p.count("/")):
        if not succeeds(["umount", point]) and _is_mounted(point):
            run(["umount", "-l", point], check=False)


def _is_mounted(point: str) -> bool:
    return any(
        line.split()[4] == point for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )


def remove_cgroup_root(name: str) -> None:
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name.lstrip("/")
        if not root.is_dir():
            continue
        # rmdir children before parents; a cgroup dir holds only kernel files.
        for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def delete_links(addresses: Iterable[str], bridges: Iterable[str]) -> None:
    for bridge in bridges:
        if Path(f"/sys/class/net/{bridge}").exists():
            run(["ip", "link", "delete", bridge], check=False)
    out = run(["ip", "-o", "addr", "show", "dev", "lo"], check=False)
    for address in addresses:
        if f" {address}/32 " in out:
            run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=False)


def _remove_container_log_links(node_dirs: Sequence[str]) -> None:
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and any(os.readlink(link).startswith(d) for d in node_dirs):
                link.unlink()
    with contextlib.suppress(OSError):
        CONTAINER_LOG_LINKS.rmdir()  # only when empty: it may hold another runtime's links


def _release_shared_state() -> None:
    """Undo the host-wide settings once no slot is claimed any more."""
    if _slots_in_use():
        return
    for iptables in ("iptables", "ip6tables"):
        while succeeds([iptables, "-w", "-D", "FORWARD", "-j", FORWARD_CHAIN]):
            pass
        run([iptables, "-w", "-F", FORWARD_CHAIN], check=False)
        run([iptables, "-w", "-X", FORWARD_CHAIN], check=False)
    if HOST_SAVED.exists():
        try:
            saved = json.loads(HOST_SAVED.read_text())
        except ValueError:
            saved = {}
        for key, value in (saved.get("sysctls") or {}).items():
            with contextlib.suppress(OSError):
                (SYSCTL / key).write_text(f"{value}\n")
        for path in saved.get("absent") or []:
            shutil.rmtree(path, ignore_errors=True)
        HOST_SAVED.unlink()
    with contextlib.suppress(OSError):
        RUN_ROOT.rmdir()


def teardown(manifest: Manifest) -> None:
    """Remove everything ``manifest`` lists. Idempotent; safe after a crash."""
    kill_leftovers(manifest)
    unmount_under([manifest.run_dir, *manifest.node_dirs])
    for root in manifest.cgroup_roots:
        remove_cgroup_root(root)
    delete_links(manifest.addresses, manifest.bridges)
    _remove_container_log_links(manifest.node_dirs)
    for path in (*manifest.node_dirs, manifest.run_dir):
        shutil.rmtree(path, ignore_errors=True)
    _release_shared_state()


def host_footprint() -> dict[str, list[str]]:
    """What real nodes can leave on this host, listed: compare one taken before
    `dev up --real-nodes` with one taken after `dev down` (they must be equal)."""
    names = (
        "containerd",
        "kubelet",
        "coredns",
        "fake-gpu-plugin",
        "dra-test-driver",
        str(RUN_ROOT),
    )
    processes = sorted(
        cmd
        for pid in _pids_mentioning(names)
        # Not the Python processes that are looking (their argv may name the same paths).
        if (cmd := _cmdline(pid)) and not Path(cmd.split()[0]).name.startswith("python")
    )
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    mounts = sorted(
        line.split()[4]
        for line in mountinfo
        if any(
            k in line.split()[4] for k in ("real-nodes", "gang-extender", "kubelet", "containerd")
        )
    )
    links = sorted(
        p.name
        for p in Path("/sys/class/net").iterdir()
        if p.name.startswith((BRIDGE_PREFIX, "veth"))
    )
    addresses = sorted(run(["ip", "-o", "addr", "show", "dev", "lo"], check=False).split("\n"))
    chains = sorted(
        line
        for tool in ("iptables-save", "ip6tables-save")
        for line in run([tool], check=False).splitlines()
        if line.startswith((":", "-A")) and any(k in line for k in ("GANG", "KUBE", "CNI"))
    )
    cgroups = sorted(
        str(p) for h in cgroup_hierarchies() for p in h.glob("gang-extender-*") if p.is_dir()
    )
    # The CDI spec dirs a DRA plugin or containerd use by default (ours are per node).
    cdi = ("/etc/cdi", "/var/run/cdi")
    paths = sorted(p for p in (*FIXED_PATHS, *cdi, str(RUN_ROOT)) if os.path.lexists(p))
    sysctls = sorted(f"{k}={(SYSCTL / k).read_text().strip()}" for k in CHANGED_SYSCTLS)
    # Unix sockets (containerd's, kubelet's, the GPU plugins') and CDI specs (a DRA
    # plugin's) under our run dir.
    runtime_files = sorted(
        str(p)
        for p in _runtime_paths(RUN_ROOT)
        if _is_socket(p) or (p.parent.name == "cdi" and p.suffix in (".json", ".yaml"))
    )
    return {
        "processes": processes,
        "sockets and CDI specs": runtime_files,
        "mounts": mounts,
        "links": links,
        "lo addresses": addresses,
        "iptables": chains,
        "cgroups": cgroups,
        "paths": paths,
        "sysctls": sysctls,
    }


def _runtime_paths(root: Path) -> list[Path]:
    """Every file under `root` but inside containers' root filesystems: a running
    container's rootfs is a mount whose files come and go while it is walked (a
    pathlib rglob then fails on a directory gone meanwhile), and holds none of
    ours. A directory that vanishes during the walk is skipped."""
    found: list[Path] = []
    for parent, dirs, files in os.walk(root, onerror=lambda _: None):
        dirs[:] = [d for d in dirs if d != "rootfs"]
        found += [Path(parent, name) for name in (*dirs, *files)]
    return found


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
