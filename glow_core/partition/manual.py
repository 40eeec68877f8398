"""Assignment by hand: node names (or shell-style patterns) -> a device, as Glow allows.

The names are those of the optimized graph (``glow dump MODEL --stage optimized``). A
device is named by its label (``cpu``, ``cpu:1``), its backend name (the first device of
that backend) or its index in the list. A pattern that matches no node, a device not in
the list, or a device that cannot run a node it was given is refused by name before
anything compiles. When several patterns match a node, the first one wins.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Mapping, Sequence

from glow_core.backend import selecting_kind
from glow_core.errors import PartitionError
from glow_core.graph.node import Node
from glow_core.partition.plan import Device
from glow_core.partition.support import SupportTable

Assignment = Mapping[str, str | int]
"""Node name or pattern -> device label, backend name or list index."""


def device_index(target: str | int, devices: Sequence[Device], pattern: str) -> int:
    labels = [d.label for d in devices]
    if isinstance(target, int) and not isinstance(target, bool):
        if 0 <= target < len(devices):
            return target
    elif isinstance(target, str):
        if target in labels:
            return labels.index(target)
        names = [d.name for d in devices]
        if target in names:
            return names.index(target)
    raise PartitionError(
        f"partition option {pattern!r} -> {target!r}: no such device; the devices are {labels} "
        f"(or their index 0..{len(devices) - 1})"
    )


def assign_by_hand(
    nodes: Sequence[Node], assignment: Assignment, devices: Sequence[Device], table: SupportTable
) -> dict[Node, int]:
    """Nodes the options name -> their device; checked as the module docstring says."""
    chosen: dict[Node, int] = {}
    operators = [n for n in nodes if n.kind != "Save"]
    for pattern, target in assignment.items():
        device = device_index(target, devices, pattern)
        matched = [n for n in operators if fnmatch.fnmatchcase(n.name, pattern)]
        if not matched:
            close = difflib.get_close_matches(pattern, [n.name for n in operators], n=3)
            hint = f"; close names: {close}" if close else ""
            raise PartitionError(
                f"partition option {pattern!r} matches no node of the optimized graph{hint} "
                "(list the names with `glow dump MODEL --stage optimized`)"
            )
        for node in matched:
            if node in chosen:
                continue
            if not table.runs(node, devices[device]):
                raise PartitionError(
                    f"partition option {pattern!r} puts {node.kind}[{selecting_kind(node).name}] "
                    f"{node.name!r} on {devices[device].label!r}, which does not run it; name a "
                    "device that does, or leave the node to the partitioner"
                )
            chosen[node] = device
    return chosen
