"""Inside a private mount namespace: a pod's ssh Secret volume as the kubelet lays it out,
mounted where the pod's container mounts it, a stock sshd, and ssh logins.

Run as root by tests/system/test_ssh_mount.py, and only there, as
`unshare -m --propagation private python -m tests.system.kubelet_ssh_volume SCENARIO`:
every mount below dies with the namespace, nothing on the machine is changed. The
scenario (JSON) holds the pod's `gang-ssh` volume and volumeMount exactly as the
webhook's patch made them, the Secret's data, the pod's fsGroup and user, the names
to resolve and the logins to try; the results are printed as JSON.

What is reproduced of the kubelet (v1.37: pkg/volume/secret, pkg/volume/emptydir,
pkg/volume/util/atomic_writer.go, pkg/volume/volume_linux.go,
pkg/volume/util/subpath/subpath_linux.go):

1. The volume directory is a fresh tmpfs mounted without a mode option (a Secret
   volume is an emptyDir of medium Memory), so its root is 1777 (drwxrwxrwt).
2. The payload: with `items`, each item's key at the item's path, else every key at
   its own name; a file's mode is the item's `mode`, else `defaultMode`, else 0644.
3. The atomic writer: a directory `..<UTC time>.<random>` chmod'ed to 0755; each file
   written into it after `MkdirAll(parent, 0777)` (so a directory such as `.ssh` is
   0777 minus the kubelet's umask: 022 here, as under systemd or a login shell,
   giving 0755), then chmod'ed to its mode. With an fsGroup, the whole volume, its
   root included, is chgrp'ed to it and chmod'ed `|0440` (files) or `|2550`
   (directories), the read-only masks. Then a symlink `..data_tmp` -> that directory
   is renamed to `..data`, and each first path component gets a symlink
   `<component>` -> `..data/<component>`.
4. The container's mount: without `subPath`, the volume directory is bind-mounted at
   `mountPath`; with it, the kubelet resolves every symlink of `<volume>/<subPath>`
   (filepath.EvalSymlinks) and bind-mounts the directory it finds, inside the
   timestamped directory (which is why a subPath mount is a snapshot); the container
   runtime bind-mounts that at `mountPath`, made 0755 in the image when missing.
   `readOnly` remounts it read-only.

The image around it: `/root` a 0700 directory of root's (Debian's), `/home/<user>`
0755 of the user's (overlays on this machine's /root and /home, writable in the
namespace only), the pod's user in /etc/passwd, /etc/group and /etc/shadow (bind-
mounted copies), the names to resolve in /etc/hosts (a copy), the key files the
logins name with `-i` (the user's, 0600), `/run/sshd` made as the
image's init script would. sshd is the distribution's, with its own /etc/ssh/
sshd_config (StrictModes left at its default, yes), told only where to listen and
which host key to use.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SSHD = "/usr/sbin/sshd"
KUBELET_UMASK = 0o022
DEFAULT_FILE_MODE = 0o644
READ_ONLY_FILE_MASK = 0o440
READ_ONLY_DIR_MASK = 0o440 | 0o110 | stat.S_ISGID
SSHD_START_SECONDS = 10.0


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def tmpfs(path: Path, mode: int | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    options = ["-o", f"mode={mode:o}"] if mode is not None else []
    run("mount", "-t", "tmpfs", *options, "tmpfs", str(path))


def bind(source: Path, target: Path, *, read_only: bool = False) -> None:
    run("mount", "--bind", str(source), str(target))
    if read_only:
        run("mount", "-o", "remount,bind,ro", str(target))


def write_secret_volume(
    directory: Path, volume: dict[str, Any], data: dict[str, str], fs_group: int | None
) -> None:
    """Steps 1-3 of the module docstring."""
    tmpfs(directory)
    secret = volume["secret"]
    default_mode = secret.get("defaultMode", DEFAULT_FILE_MODE)
    items = secret.get("items") or [{"key": key, "path": key} for key in data]
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    timestamped = Path(tempfile.mkdtemp(prefix=stamp, dir=directory))
    timestamped.chmod(0o755)
    previous = os.umask(KUBELET_UMASK)
    try:
        for item in items:
            path = timestamped / item["path"]
            path.parent.mkdir(mode=0o777, parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
            path.chmod(item.get("mode", default_mode))
    finally:
        os.umask(previous)
    if fs_group is not None:
        for path in [directory, *sorted(directory.rglob("*"))]:
            os.lchown(path, -1, fs_group)
            if not path.is_symlink():
                mask = READ_ONLY_DIR_MASK if path.is_dir() else READ_ONLY_FILE_MASK
                path.chmod(stat.S_IMODE(path.stat().st_mode) | mask)
    os.symlink(timestamped.name, directory / "..data_tmp")
    os.rename(directory / "..data_tmp", directory / "..data")
    for first in sorted({item["path"].split("/")[0] for item in items}):
        os.symlink(f"..data/{first}", directory / first)


def mount_in_container(directory: Path, mount: dict[str, Any]) -> None:
    """Step 4 of the module docstring."""
    target = Path(mount["mountPath"])
    source = directory
    if mount.get("subPath"):
        source = Path(os.path.realpath(directory / mount["subPath"]))
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    bind(source, target, read_only=bool(mount.get("readOnly")))


def writable(directory: Path, layers: Path) -> None:
    """`directory` as it is, writable in this namespace only (an overlay on a tmpfs)."""
    upper, scratch = layers / f"{directory.name}-upper", layers / f"{directory.name}-work"
    upper.mkdir()
    scratch.mkdir()
    options = f"lowerdir={directory},upperdir={upper},workdir={scratch}"
    run("mount", "-t", "overlay", "overlay", "-o", options, str(directory))


def image(work: Path, scenario: dict[str, Any]) -> None:
    """The container image's directories and accounts the login needs.

    /root, /home and /run stay what they are on this machine (root's 0700 home, the
    Python running this), made writable for the mount points and the user's home.
    """
    layers = work / "layers"
    tmpfs(layers, 0o755)
    for directory in ("/root", "/home", "/run"):
        writable(Path(directory), layers)
    Path("/root").chmod(0o700)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    user = scenario.get("user")
    extra = {"passwd": "", "group": "", "shadow": ""}
    if user is not None:
        uid, name = user["uid"], user["name"]
        home = Path(f"/home/{name}")
        home.mkdir(mode=0o755)
        os.chown(home, uid, uid)
        extra = {
            "passwd": f"{name}:x:{uid}:{uid}::{home}:/bin/sh\n",
            "group": f"{name}:x:{uid}:\n",
            "shadow": f"{name}:*:19000:0:99999:7:::\n",
        }
    for path, key in scenario["key_files"].items():
        written = Path(path)
        written.write_text(key)
        written.chmod(0o600)
        if user is not None:
            os.chown(written, user["uid"], user["uid"])
    hosts = "".join(f"127.0.0.1 {name}\n" for name in scenario["hosts"])
    for name, added in [*extra.items(), ("hosts", hosts)]:
        original = Path("/etc") / name
        copy = work / f"etc-{name}"
        copy.write_text(original.read_text() + added)
        copy.chmod(stat.S_IMODE(original.stat().st_mode))
        bind(copy, original)


def start_sshd(work: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    host_key = work / "ssh_host_ed25519_key"
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
    log = work / "sshd.log"
    options = [f"-oPort={port}", "-oListenAddress=127.0.0.1", "-oPidFile=none"]
    with log.open("wb") as sink:
        sshd = subprocess.Popen(
            [SSHD, "-D", "-e", "-h", str(host_key), *options], stdout=sink, stderr=sink
        )
    deadline = time.monotonic() + SSHD_START_SECONDS
    while time.monotonic() < deadline and sshd.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return sshd, log
        except OSError:
            time.sleep(0.1)
    sshd.kill()
    raise SystemExit(f"sshd did not listen on port {port}: {log.read_text()}")


def effective_sshd_options(port: int, work: Path) -> dict[str, str]:
    shown = subprocess.run(
        [SSHD, "-T", "-h", str(work / "ssh_host_ed25519_key"), f"-oPort={port}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.split(" ", 1) for line in shown.splitlines() if " " in line)


def login(argv: list[str], user: dict[str, Any] | None) -> dict[str, Any]:
    """Run an ssh command as the pod's user (root when None), with no agent."""
    env = {"PATH": os.environ["PATH"], "LANG": "C", "HOME": "/root"}
    if user is not None:
        env["HOME"] = f"/home/{user['name']}"
        uid = user["uid"]
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def listing(path: Path) -> dict[str, Any]:
    found = {}
    for entry in [path, *sorted(path.iterdir())]:
        info = entry.lstat()
        found[str(entry)] = {
            "mode": stat.S_IMODE(info.st_mode),
            "uid": info.st_uid,
            "gid": info.st_gid,
            "dir": stat.S_ISDIR(info.st_mode),
        }
    return found


def main() -> None:
    scenario = json.loads(Path(sys.argv[1]).read_text())
    work = Path(scenario["work"])
    image(work, scenario)
    volume_dir = work / "volume"
    write_secret_volume(volume_dir, scenario["volume"], scenario["secret"], scenario["fs_group"])
    mount_in_container(volume_dir, scenario["mount"])
    sshd, log = start_sshd(work, scenario["port"])
    try:
        results = {
            "sshd_options": effective_sshd_options(scenario["port"], work),
            "ssh_path": listing(Path(scenario["mount"]["mountPath"])),
            "logins": {
                name: login(argv, scenario.get("user")) for name, argv in scenario["logins"].items()
            },
        }
    finally:
        sshd.terminate()
        sshd.wait()
    results["sshd_log"] = log.read_text()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
