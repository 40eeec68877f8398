"""Forced alternation: cut the schedule into stretches that take turns between two devices.

A testing aid, not an optimization. Boundary tensors are where a partitioned run can go
wrong without a single-backend run noticing: a device that returns a stale buffer, forgets
an output, or reads its input before the producer finished. With ``alternate=N``, the
operators of the optimized graph, in schedule order, are cut into ``N`` stretches of
(nearly) equal length; even stretches go to the first device of the list, odd ones to the
last (the reference, in the conformance suite's ``partitions`` layer), so every other
partition runs on the reference and tensors cross in both directions. A node the stretch's
device does not run keeps the device support chose; nodes placed by hand never move. The
cost phase is skipped (it would merge the stretches back): the split is what was asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from glow_core.errors import PartitionError
from glow_core.graph.node import Node
from glow_core.partition.support import SupportTable


def check_stretches(stretches: int) -> None:
    """Refuse a stretch count that cannot cut anything (it must be an int of at least 2)."""
    if isinstance(stretches, bool) or not isinstance(stretches, int) or stretches < 2:
        raise PartitionError(
            f"alternate={stretches!r}: the number of stretches must be an integer of at least 2 "
            "(2 puts the first half of the schedule on the first device, the second on the last)"
        )


def alternate(
    order: Sequence[Node],
    assignment: dict[Node, int],
    table: SupportTable,
    stretches: int,
    pinned: Mapping[Node, int],
) -> None:
    """Move the operators of ``order`` (schedule order) between the first and the last
    device, stretch by stretch, in ``assignment`` (edited in place; Saves are left to follow
    their values)."""
    check_stretches(stretches)
    operators = [n for n in order if n.kind != "Save"]
    first, last = 0, len(table.devices) - 1
    for position, node in enumerate(operators):
        if node in pinned:
            continue
        stretch = position * stretches // len(operators)
        device = first if stretch % 2 == 0 else last
        if table.runs(node, table.devices[device]):
            assignment[node] = device
