"""The data of Secret `<group>-ssh`: one key pair per group and an ssh config for its members.

Key generation is computation only (no I/O), so it lives with the other renders; the
controller decides when to call it (once per group, never while the Secret exists).
The private key never appears in a repr, a log line or an exception message.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from extender.domain.objects.limits import MAX_SSH_PATH, quoted
from extender.domain.objects.membership import (
    SSH_PATH_ANNOTATION,
    SSH_PORT_ANNOTATION,
    MembershipError,
)
from extender.injection import names

# 3072-bit RSA: OpenSSH's default size, accepted by every sshd the seed images ship.
RSA_KEY_BITS = 3072
RSA_PUBLIC_EXPONENT = 65537

PRIVATE_KEY_KEY = "id_rsa"
PUBLIC_KEY_KEY = "id_rsa.pub"
AUTHORIZED_KEYS_KEY = "authorized_keys"
CONFIG_KEY = "config"

MAX_PORT = 65535
# Directories the ssh Secret must not hide: the root, all of /etc, and the host lists.
_FORBIDDEN_SSH_PATHS = frozenset({"/", "/etc", names.VOLCANO_MOUNT_PATH})


class SSHKeyError(ValueError):
    """Stored key material that does not parse or does not belong together."""


@dataclass(frozen=True)
class SSHKeyPair:
    # repr=False: a dataclass repr would otherwise print the private key in any traceback.
    private_openssh: str = field(repr=False)
    public_openssh: str


def ssh_path_of(meta: Mapping[str, Any]) -> str:
    """Where a pod wants the Secret mounted (annotation), normalised; the default when absent."""
    raw = (meta.get("annotations") or {}).get(SSH_PATH_ANNOTATION)
    if raw is None:
        return names.DEFAULT_SSH_PATH
    if not isinstance(raw, str) or len(raw) > MAX_SSH_PATH:
        raise MembershipError(
            f"annotation {SSH_PATH_ANNOTATION}={quoted(raw)} must be a path of at most "
            f"{MAX_SSH_PATH} characters (it is written into every container's mounts)"
        )
    normal = posixpath.normpath(raw) if raw.startswith("/") else ""
    if not normal or normal in _FORBIDDEN_SSH_PATHS or ":" in raw:
        raise MembershipError(
            f"annotation {SSH_PATH_ANNOTATION}={quoted(raw)} must be an absolute directory path "
            f"other than {', '.join(sorted(_FORBIDDEN_SSH_PATHS))}, without ':', "
            f"such as {names.DEFAULT_SSH_PATH}"
        )
    return normal


def ssh_port_of(meta: Mapping[str, Any]) -> int:
    """The port members' sshd listens on (annotation); the default 22 when absent."""
    raw = (meta.get("annotations") or {}).get(SSH_PORT_ANNOTATION)
    if raw is None:
        return names.DEFAULT_SSH_PORT
    if (
        not isinstance(raw, str)
        or not raw.isdigit()
        or len(raw) > 5
        or not 1 <= int(raw) <= MAX_PORT
    ):
        raise MembershipError(
            f"annotation {SSH_PORT_ANNOTATION}={quoted(raw)} must be a port number 1..{MAX_PORT}"
        )
    return int(raw)


def generate_key_pair(*, comment: str) -> SSHKeyPair:
    """A fresh RSA key pair in OpenSSH formats; `comment` ends the public key line."""
    key = rsa.generate_private_key(public_exponent=RSA_PUBLIC_EXPONENT, key_size=RSA_KEY_BITS)
    private = key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.OpenSSH,
        encryption_algorithm=serialization.NoEncryption(),
    ).decode("ascii")
    public = (
        key.public_key()
        .public_bytes(
            encoding=serialization.Encoding.OpenSSH, format=serialization.PublicFormat.OpenSSH
        )
        .decode("ascii")
    )
    return SSHKeyPair(private_openssh=private, public_openssh=f"{public} {comment}\n")


def key_pair_from_secret_data(data: Mapping[str, str]) -> SSHKeyPair:
    """The key pair kept in an existing Secret's (decoded) data.

    Raises SSHKeyError when a key is missing or the public key is not the private
    key's, so a damaged Secret is reported instead of silently handed to pods.
    """
    private = data.get(PRIVATE_KEY_KEY)
    public = data.get(PUBLIC_KEY_KEY)
    if not private or not public:
        raise SSHKeyError(f"the Secret lacks {PRIVATE_KEY_KEY} or {PUBLIC_KEY_KEY}")
    try:
        loaded = serialization.load_ssh_private_key(private.encode("ascii"), password=None)
    except (ValueError, UnicodeEncodeError) as error:
        # The message of `error` cannot contain key bytes; the key itself is not shown.
        raise SSHKeyError(f"{PRIVATE_KEY_KEY} does not parse as an OpenSSH key: {error}") from None
    derived = (
        loaded.public_key()
        .public_bytes(
            encoding=serialization.Encoding.OpenSSH, format=serialization.PublicFormat.OpenSSH
        )
        .decode("ascii")
    )
    if public.split()[:2] != derived.split()[:2]:
        raise SSHKeyError(f"{PUBLIC_KEY_KEY} is not the public half of {PRIVATE_KEY_KEY}")
    return SSHKeyPair(private_openssh=private, public_openssh=public)


def render_ssh_config(group: str, *, port: int, ssh_path: str) -> str:
    """An ssh client config: no host-key prompts, and every member by FQDN or short name.

    Members are matched by pattern (`<group>-*`), not listed one by one: the config
    is then the same whatever the group's members are, so the copy a container
    mounted when it started (a subPath mount, which the kubelet never refreshes) is
    still right after the group grows or shrinks. `Host <group>-*.<group>` (and the
    longer `<fqdn>.<namespace>.svc...` forms) gets the port; a short name (no dot)
    gets the port and `HostName <name>.<group>`, which resolves in the namespace.

    Host keys are not checked because members are recreated with new host keys on
    every restart and the network is the cluster's; the key pair authenticates users.
    """
    service = names.service_name(group)
    members = names.hostname_pattern(group)
    lines = [
        "StrictHostKeyChecking no",
        "UserKnownHostsFile /dev/null",
        f"IdentityFile {ssh_path.rstrip('/')}/{PRIVATE_KEY_KEY}",
        "",
        f"Host {members}.{service} {members}.{service}.*",
        f"  Port {port}",
        "",
        f"Host {members} !*.*",
        f"  HostName %h.{service}",
        f"  Port {port}",
    ]
    return "\n".join(lines) + "\n"


def render_secret_data(keys: SSHKeyPair, group: str, *, port: int, ssh_path: str) -> dict[str, str]:
    """Every key of the Secret (string data; the controller base64-encodes).

    Nothing in it depends on the group's members, only on the group, its key pair
    and its ssh port and path: members mount it as a snapshot (`volume_items`).
    """
    return {
        PRIVATE_KEY_KEY: keys.private_openssh,
        PUBLIC_KEY_KEY: keys.public_openssh,
        AUTHORIZED_KEYS_KEY: keys.public_openssh,
        CONFIG_KEY: render_ssh_config(group, port=port, ssh_path=ssh_path),
    }


def volume_items() -> list[dict[str, str]]:
    """The Secret volume's items: every key of the Secret as a file under `.ssh/`.

    The volume is mounted with `subPath: .ssh`, so the pod's ssh path is a directory
    the kubelet made inside the volume (0755, root's), not the volume's root (a
    1777 tmpfs that sshd's StrictModes refuses).
    """
    return [
        {"key": key, "path": f"{names.SSH_VOLUME_DIR}/{key}"}
        for key in (PRIVATE_KEY_KEY, PUBLIC_KEY_KEY, AUTHORIZED_KEYS_KEY, CONFIG_KEY)
    ]
