"""The Secret `<group>-ssh`: a key pair per group and an ssh config naming every member."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from extender.domain.membership import SSH_PATH_ANNOTATION, SSH_PORT_ANNOTATION, MembershipError
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
)

MEMBERS = GroupLayout(
    "hvd", (TaskLayout("master", 1, 1), TaskLayout("worker", 2, 1)), LayoutSource.MEMBER_PODS
).members()


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
    data = render_secret_data(keys, MEMBERS, port=22, ssh_path="/root/.ssh")
    assert set(data) == {"id_rsa", "id_rsa.pub", "authorized_keys", "config"}
    assert data["authorized_keys"] == data["id_rsa.pub"]


def test_key_pair_round_trips_through_secret_data(keys: SSHKeyPair) -> None:
    data = render_secret_data(keys, MEMBERS, port=22, ssh_path="/root/.ssh")
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


def test_config_disables_host_key_prompts_and_names_every_member_with_its_port() -> None:
    config = render_ssh_config(MEMBERS, port=2222, ssh_path="/root/.ssh")
    assert config == (
        "StrictHostKeyChecking no\n"
        "UserKnownHostsFile /dev/null\n"
        "IdentityFile /root/.ssh/id_rsa\n"
        "\n"
        "Host hvd-master-0.hvd hvd-master-0\n"
        "  HostName hvd-master-0.hvd\n"
        "  Port 2222\n"
        "\n"
        "Host hvd-worker-0.hvd hvd-worker-0\n"
        "  HostName hvd-worker-0.hvd\n"
        "  Port 2222\n"
        "\n"
        "Host hvd-worker-1.hvd hvd-worker-1\n"
        "  HostName hvd-worker-1.hvd\n"
        "  Port 2222\n"
    )


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
