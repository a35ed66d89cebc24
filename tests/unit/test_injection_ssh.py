"""The Secret `<group>-ssh`: a key pair per group and an ssh config matching every member."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from extender.domain.objects.membership import (
    SSH_PATH_ANNOTATION,
    SSH_PORT_ANNOTATION,
    MembershipError,
)
from extender.injection.layout import GroupLayout, LayoutSource, TaskLayout
from extender.injection.ssh import (
    SSHKeyError,
    SSHKeyPair,
    generate_key_pair,
    key_pair_from_secret_data,
    render_secret_data,
    render_ssh_config,
    ssh_path_of,
    ssh_port_of,
    volume_items,
)

MEMBERS = GroupLayout(
    "hvd", (TaskLayout("master", 1, 1), TaskLayout("worker", 2, 1)), LayoutSource.MEMBER_PODS
).members()
SSH_CLIENT = shutil.which("ssh")


@pytest.fixture(scope="module")
def keys() -> SSHKeyPair:
    return generate_key_pair(comment="gang-extender@ns/hvd")


def test_generated_private_key_parses_and_matches_the_public_key(keys: SSHKeyPair) -> None:
    private = serialization.load_ssh_private_key(keys.private_openssh.encode(), password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert keys.public_openssh == f"{public.decode()} gang-extender@ns/hvd\n"


def test_the_private_key_is_not_in_the_repr(keys: SSHKeyPair) -> None:
    assert "PRIVATE" not in repr(keys)


def test_two_groups_get_different_keys() -> None:
    assert (
        generate_key_pair(comment="a").public_openssh.split()[1]
        != (generate_key_pair(comment="b").public_openssh.split()[1])
    )


def test_secret_data_has_the_volcano_keys(keys: SSHKeyPair) -> None:
    data = render_secret_data(keys, "hvd", port=22, ssh_path="/root/.ssh")
    assert set(data) == {"id_rsa", "id_rsa.pub", "authorized_keys", "config"}
    assert data["authorized_keys"] == data["id_rsa.pub"]


def test_key_pair_round_trips_through_secret_data(keys: SSHKeyPair) -> None:
    data = render_secret_data(keys, "hvd", port=22, ssh_path="/root/.ssh")
    assert key_pair_from_secret_data(data) == keys


def test_a_public_key_from_another_pair_is_refused(keys: SSHKeyPair) -> None:
    other = generate_key_pair(comment="other")
    data = {"id_rsa": keys.private_openssh, "id_rsa.pub": other.public_openssh}
    with pytest.raises(SSHKeyError, match="not the public half"):
        key_pair_from_secret_data(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({}, id="empty"),
        pytest.param({"id_rsa": "garbage", "id_rsa.pub": "ssh-rsa AAAA"}, id="garbage"),
    ],
)
def test_damaged_secret_data_is_refused_without_echoing_the_key(data: dict[str, str]) -> None:
    with pytest.raises(SSHKeyError) as raised:
        key_pair_from_secret_data(data)
    assert "garbage" not in str(raised.value)


def test_config_disables_host_key_prompts_and_matches_every_member_with_its_port() -> None:
    config = render_ssh_config("hvd", port=2222, ssh_path="/root/.ssh")
    assert config == (
        "StrictHostKeyChecking no\n"
        "UserKnownHostsFile /dev/null\n"
        "IdentityFile /root/.ssh/id_rsa\n"
        "\n"
        "Host hvd-*.hvd hvd-*.hvd.*\n"
        "  Port 2222\n"
        "\n"
        "Host hvd-* !*.*\n"
        "  HostName %h.hvd\n"
        "  Port 2222\n"
    )


def test_the_secret_is_the_same_whatever_the_members(keys: SSHKeyPair) -> None:
    # Members mount it as a snapshot (subPath): a change with the members would leave
    # the members already running with a stale copy.
    data = render_secret_data(keys, "hvd", port=22, ssh_path="/root/.ssh")
    for member in MEMBERS:
        assert member.hostname not in data["config"]
    assert "hvd" in data["config"]


def test_every_key_of_the_secret_is_an_item_under_the_mounted_directory(
    keys: SSHKeyPair,
) -> None:
    data = render_secret_data(keys, "hvd", port=22, ssh_path="/root/.ssh")
    items = volume_items()
    assert sorted(item["key"] for item in items) == sorted(data)
    assert all(item["path"] == f".ssh/{item['key']}" for item in items)


@pytest.mark.skipif(SSH_CLIENT is None, reason="no ssh client (Debian: openssh-client)")
@pytest.mark.parametrize(
    ("host", "hostname", "port"),
    [
        pytest.param("hvd-worker-1", "hvd-worker-1.hvd", "2222", id="short name"),
        pytest.param("hvd-worker-1.hvd", "hvd-worker-1.hvd", "2222", id="fqdn"),
        pytest.param(
            "hvd-master-0.hvd.ns.svc.cluster.local",
            "hvd-master-0.hvd.ns.svc.cluster.local",
            "2222",
            id="cluster fqdn",
        ),
        # A member the group did not have when the Secret was written: matched too.
        pytest.param("hvd-worker-17", "hvd-worker-17.hvd", "2222", id="a later member"),
        pytest.param("hvdx-worker-0", "hvdx-worker-0", "22", id="another group's host"),
        pytest.param("example.com", "example.com", "22", id="elsewhere"),
    ],
)
def test_openssh_resolves_members_by_the_config(
    tmp_path: Path, host: str, hostname: str, port: str
) -> None:
    assert SSH_CLIENT is not None
    config = tmp_path / "config"
    config.write_text(render_ssh_config("hvd", port=2222, ssh_path="/root/.ssh"))
    # `ssh -G` prints the options it would use for the host, and connects nowhere.
    shown = subprocess.run(
        [SSH_CLIENT, "-G", "-F", str(config), host],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    ).stdout.splitlines()
    options = dict(line.split(" ", 1) for line in shown if " " in line)
    assert (options["hostname"], options["port"]) == (hostname, port)
    assert options["stricthostkeychecking"] == "false"
    assert options["identityfile"] == "/root/.ssh/id_rsa"


@pytest.mark.parametrize(
    ("annotations", "path", "port"),
    [
        pytest.param({}, "/root/.ssh", 22, id="defaults"),
        pytest.param(
            {SSH_PATH_ANNOTATION: "/home/mpi/.ssh/", SSH_PORT_ANNOTATION: "2222"},
            "/home/mpi/.ssh",
            2222,
            id="overridden and normalised",
        ),
    ],
)
def test_ssh_path_and_port_from_annotations(
    annotations: dict[str, str], path: str, port: int
) -> None:
    meta = {"annotations": annotations}
    assert (ssh_path_of(meta), ssh_port_of(meta)) == (path, port)


@pytest.mark.parametrize("value", ["relative/.ssh", "/", "/etc", "/etc/volcano", "/a:b", ""])
def test_bad_ssh_paths_are_refused_with_an_example(value: str) -> None:
    with pytest.raises(MembershipError, match="such as /root/.ssh"):
        ssh_path_of({"annotations": {SSH_PATH_ANNOTATION: value}})


@pytest.mark.parametrize("value", ["0", "65536", "ssh", "-1", ""])
def test_bad_ssh_ports_are_refused(value: str) -> None:
    with pytest.raises(MembershipError, match="port number 1..65535"):
        ssh_port_of({"annotations": {SSH_PORT_ANNOTATION: value}})
