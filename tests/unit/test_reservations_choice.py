"""Starvation reservations, the pure choice (domain/starvation/reservations.py): which nodes a
starving gang reserves, in what order they are listed, and how the message names them."""

from __future__ import annotations

from extender.domain.objects.membership import GroupKey
from extender.domain.starvation.reservations import (
    MAX_NAMED_NODES,
    NodeGpus,
    Reservation,
    choose_nodes,
    node_list,
    reservation_message,
)

BIG = GroupKey("default", "big")


def test_a_node_without_gpus_is_never_reserved_even_to_widen_a_choice() -> None:
    # The members do not fit on the one GPU node; a GPU-less node adds no GPUs, so it
    # is no reservation either.
    nodes = {"a": NodeGpus(4, 4), "cpu-only": NodeGpus(0, 0)}
    assert choose_nodes(4, nodes, holds=lambda chosen: len(chosen) >= 2) is None
    assert choose_nodes(4, nodes) == ("a",)


def test_among_equally_free_nodes_the_larger_one_is_reserved() -> None:
    # Both hold the gang and have as many GPUs free now; the bigger node has more
    # GPUs that can free, so it is taken, whatever the names.
    nodes = {"a-small": NodeGpus(4, 2), "b-big": NodeGpus(8, 2)}
    assert choose_nodes(4, nodes) == ("b-big",)


def test_equally_free_reserved_nodes_are_listed_larger_first() -> None:
    nodes = {"a-small": NodeGpus(4, 1), "b-big": NodeGpus(8, 1)}
    assert choose_nodes(12, nodes) == ("b-big", "a-small")


def test_the_node_list_names_at_most_five_nodes_then_an_ellipsis() -> None:
    five = [f"gpu-{i}" for i in range(MAX_NAMED_NODES)]
    assert MAX_NAMED_NODES == 5
    assert node_list(five) == "gpu-0, gpu-1, gpu-2, gpu-3, gpu-4"
    assert node_list([*five, "gpu-5"]) == "gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, ..."
    assert node_list(["gpu-0"]) == "gpu-0"


def test_the_message_of_a_reservation_over_many_nodes_is_shortened() -> None:
    nodes = tuple(f"n{i}" for i in range(7))
    r = Reservation(BIG, nodes, need=7, started=0.0, deadline=10.0)
    assert reservation_message(r, {"n0": 1, "n6": 1}) == (
        "reserving n0, n1, n2, n3, n4, ...: 2/7 GPUs free"
    )
