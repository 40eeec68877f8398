"""Device memory: what a group of nodes needs, splitting groups that do not fit, placing them.

A group's footprint is its constants (each counted once), its placeholders (model inputs
and outputs, boundary tensors in and out) and its activation arena, estimated as the peak
of live results over the schedule order (what the memory planner approaches). A group
over its device's capacity is cut in schedule order: each piece takes as many nodes as
fit, then the cut moves back (by at most half the piece) to where the fewest bytes cross
it, so the boundary stays small. Pieces then go to the devices of the same backend,
first that still has room, in the caller's order.
"""

from __future__ import annotations

from collections.abc import Sequence

from glow_core.errors import PartitionError
from glow_core.graph.node import Constant, Node, is_storage
from glow_core.partition.plan import Device, format_bytes
from glow_core.schedule import result_bytes


def constant_bytes(nodes: Sequence[Node]) -> int:
    seen: dict[Constant, None] = {}
    for n in nodes:
        for value in n.inputs:
            if isinstance(value, Constant):
                seen[value] = None
    return sum(c.type.nbytes for c in seen)


def footprint(nodes: Sequence[Node]) -> tuple[int, int, int]:
    """(constant, placeholder, arena) bytes of ``nodes`` (schedule order) run as one function."""
    members = set(nodes)
    remaining: dict[Node, int] = {}
    placeholder = 0
    outside: set[Node] = set()
    for n in nodes:
        for value in n.dependencies:
            if value in members or value in outside:
                continue
            outside.add(value)
            if not isinstance(value, Constant):
                placeholder += value.type.nbytes  # a model input or a boundary tensor read
    live = peak = 0
    for n in nodes:
        inside = [u for u, _ in n.users if u in members]
        if n.kind == "Save" or len(inside) < len(n.users):
            placeholder += n.type.nbytes  # a model output or a boundary tensor written
        if inside:
            remaining[n] = len(inside)
            live += result_bytes(n)
            peak = max(peak, live)
        for value in n.dependencies:
            if value in remaining:
                remaining[value] -= 1
                if remaining[value] == 0:
                    live -= result_bytes(value)
                    del remaining[value]
    return constant_bytes(nodes), placeholder, peak


def need(nodes: Sequence[Node]) -> int:
    return sum(footprint(nodes))


def crossing_bytes(nodes: Sequence[Node], cut: int) -> int:
    """Bytes of results made before position ``cut`` and read at or after it."""
    later = set(nodes[cut:])
    return sum(
        n.type.nbytes for n in nodes[:cut] if not is_storage(n) and any(u in later for u, _ in n.users)
    )


def split_to_fit(nodes: list[Node], capacity: int, device: Device) -> list[list[Node]]:
    """``nodes`` cut in schedule order into pieces that each fit ``capacity`` bytes."""
    pieces: list[list[Node]] = []
    start = 0
    while start < len(nodes):
        end = start + 1
        if need(nodes[start:end]) > capacity:
            raise too_big(nodes[start], need(nodes[start:end]), device)
        # Grow by doubling then bisect: need() is linear in the piece, so this stays fast.
        step = 1
        while end < len(nodes) and need(nodes[start : min(end + step, len(nodes))]) <= capacity:
            end = min(end + step, len(nodes))
            step *= 2
        low, high = end, min(end + step, len(nodes) + 1)
        while high - low > 1:
            mid = (low + high) // 2
            if need(nodes[start:mid]) <= capacity:
                low = mid
            else:
                high = mid
        end = low
        if end < len(nodes):
            window = range(max(start + 1, end - (end - start) // 2), end + 1)
            end = min(window, key=lambda cut: (crossing_bytes(nodes[start:], cut - start), -cut))
        pieces.append(nodes[start:end])
        start = end
    return pieces


def too_big(node: Node, size: int, device: Device) -> PartitionError:
    return PartitionError(
        f"{node.kind} {node.name!r} needs {format_bytes(size)} ({size} bytes: constants, "
        f"operands and result) but device {device.label!r} holds {format_bytes(device.capacity or 0)} "
        f"({device.capacity} bytes); give that backend more memory (option memory_bytes) or add a "
        "backend with room for it to the list"
    )


def place(pieces: Sequence[tuple[int, list[Node]]], devices: Sequence[Device]) -> list[int]:
    """A device per piece: its own, or a device of the same backend with room left.

    Every piece already fits one device; several pieces share a device while their sum
    fits. Raises PartitionError with the sizes when the devices of a backend are full.
    """
    used = [0] * len(devices)
    chosen: list[int] = []
    for device_index, nodes in pieces:
        size = need(nodes)
        own = devices[device_index]
        siblings = [
            i for i, d in enumerate(devices) if d.name == own.name and type(d.backend) is type(own.backend)
        ]
        fits = [i for i in siblings if devices[i].capacity is None or used[i] + size <= devices[i].capacity]
        if not fits:
            room = ", ".join(f"{devices[i].label} {format_bytes(devices[i].capacity or 0)}" for i in siblings)
            total = size + sum(used[i] for i in siblings)
            raise PartitionError(
                f"the partitions for backend {own.name!r} need {format_bytes(total)} in all but its "
                f"devices hold {room}; add another {own.name!r} device to the list or raise memory_bytes"
            )
        target = device_index if device_index in fits else fits[0]
        used[target] += size
        chosen.append(target)
    return chosen
