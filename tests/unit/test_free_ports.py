"""free_ports: picks distinct, bindable loopback ports below the ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from extender.devcluster.loopback import LOWEST_PICKED_PORT, free_ports


def range_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return path


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_ports_are_below_the_ephemeral_range_distinct_and_free(tmp_path: Path) -> None:
    ports = free_ports(20, ephemeral_range_file=range_file(tmp_path, "32768\t60999\n"))
    assert len(set(ports)) == 20
    assert all(LOWEST_PICKED_PORT <= port < 32768 for port in ports), ports
    assert all(bindable(port) for port in ports)


def test_a_port_in_use_is_never_picked(tmp_path: Path) -> None:
    """With the range leaving exactly one port below it, a listener there is skipped
    and the kernel's choice (in the ephemeral range) is given instead."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]

        class Always(random.Random):
            def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
                return port

        if port <= LOWEST_PICKED_PORT + 1000:
            pytest.skip(f"the kernel gave port {port}, too low for this test's range")
        picked = free_ports(
            3, ephemeral_range_file=range_file(tmp_path, f"{port + 1} 65000"), rng=Always()
        )
        assert port not in picked
        assert len(set(picked)) == 3
    finally:
        taken.close()


@pytest.mark.parametrize("text", ["", "garbage", "1024 65000", "11000 65000"])
def test_without_room_below_a_readable_range_the_kernel_chooses(tmp_path: Path, text: str) -> None:
    """No range, an unreadable one, or one starting too low to leave 1,000 ports above
    the lowest picked: bind(0), which always finds a free port."""
    ports = free_ports(5, ephemeral_range_file=range_file(tmp_path, text))
    assert len(set(ports)) == 5
    assert all(bindable(port) for port in ports)
    low, high = system_ephemeral_range()
    assert all(low <= port <= high for port in ports), ports


def system_ephemeral_range() -> tuple[int, int]:
    """Where the kernel's bind(0) picks (Linux; the whole port space elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    except (OSError, ValueError):
        return 1, 65535
    return int(low), int(high)


def test_no_range_file_at_all(tmp_path: Path) -> None:
    ports = free_ports(2, ephemeral_range_file=tmp_path / "missing")
    assert len(set(ports)) == 2
