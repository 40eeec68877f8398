"""The cost model: seconds per node on a device, seconds per boundary tensor, island merging.

A node's default cost is a roofline: the larger of its FLOPs over the device's peak and
its bytes (operands read, result written) over the device's memory bandwidth. A boundary
tensor costs a fixed hand-over plus its bytes over each side's transfer bandwidth (none
for a device that works in host memory). An *island* is a group whose transfers cost more
than running it on a neighbouring device would: its nodes move to that neighbour (which
must run every one of them), and the groups are formed again, until nothing moves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from glow_core.backend import Backend, BackendInfo
from glow_core.graph.node import Node, is_storage
from glow_core.partition.plan import Device

DEFAULT_PEAK_FLOPS = 50e9
"""FLOP/s assumed for a device that declares none (a few cores' vector units)."""
DEFAULT_MEMORY_BANDWIDTH = 20e9
"""Bytes/s assumed for a device that declares none."""
HANDOVER_SECONDS = 20e-6
"""Fixed cost of one boundary tensor between two partitions: a function call, the input
checks, a copy into the next function's placeholders, a thread hop."""


def flops(node: Node) -> int:
    """Floating-point operations of ``node``: 2 per multiply-add for products and
    convolutions (read from the shapes), one per result element otherwise."""
    out = node.type.size
    if node.kind == "Save" or is_storage(node):
        return 0
    names = node.spec.operands
    if "filter" in names:  # convolutions: filter [cout, cin/group, k...]
        filt = node.operand("filter").type
        return 2 * out * (filt.size // max(filt.shape[0], 1))
    if node.kind in ("MatMul", "BatchMatMul", "FullyConnected", "Gemm") and node.inputs:
        inner = node.inputs[0].type.shape[-1] if node.inputs[0].type.shape else 1
        return 2 * out * inner
    return out


def moved_bytes(node: Node) -> int:
    """Bytes ``node`` reads and writes once each."""
    return node.type.nbytes + sum(i.type.nbytes for i in node.inputs)


def roofline_seconds(node: Node, info: BackendInfo) -> float:
    peak = info.peak_flops or DEFAULT_PEAK_FLOPS
    bandwidth = info.memory_bandwidth or DEFAULT_MEMORY_BANDWIDTH
    return max(flops(node) / peak, moved_bytes(node) / bandwidth)


def node_seconds(node: Node, device: Device) -> float:
    """The backend's ``estimate_cost`` hook, or the roofline with the device's info read
    once (the default hook would ask ``info()`` again for every node)."""
    if node.kind == "Save":
        return 0.0
    if type(device.backend).estimate_cost is Backend.estimate_cost:
        return roofline_seconds(node, device.info)
    return device.backend.estimate_cost(node)


def transfer_seconds(nbytes: int, source: Device, target: Device) -> float:
    """Seconds to hand ``nbytes`` from a partition on ``source`` to one on ``target``."""
    seconds = HANDOVER_SECONDS
    for device in (source, target):
        if device.info.transfer_bandwidth:
            seconds += nbytes / device.info.transfer_bandwidth
    return seconds


Runs = Callable[[Node, int], bool]
"""(node, device index) -> whether that device runs the node."""


def merge_islands(
    groups: Sequence[tuple[int, list[Node]]],
    assignment: dict[Node, int],
    devices: Sequence[Device],
    runs: Runs,
    pinned: set[Node],
    cost_cache: dict[tuple[Node, int], float] | None = None,
) -> bool:
    """Move the nodes of every island to the neighbour device that makes the run cheaper.

    Changes ``assignment`` in place; returns whether anything moved (the caller groups
    again). Nodes in ``pinned`` (assigned by hand) never move. ``cost_cache`` keeps node
    costs from one round to the next.
    """
    cost_cache = {} if cost_cache is None else cost_cache

    def cost(nodes: list[Node], device: int) -> float:
        total = 0.0
        for n in nodes:
            key = (n, device)
            if key not in cost_cache:
                cost_cache[key] = node_seconds(n, devices[device])
            total += cost_cache[key]
        return total

    moved = False
    for device, nodes in groups:
        members = set(nodes)
        if members & pinned:
            continue
        edges = _edges(nodes, members, assignment)
        neighbours = {d for d, _ in edges if d != device}
        if not neighbours:
            continue
        best, best_cost = device, cost(nodes, device) + _transfers(edges, device, devices)
        for other in sorted(neighbours):
            if not all(n.kind == "Save" or runs(n, other) for n in nodes):
                continue
            candidate = cost(nodes, other) + _transfers(edges, other, devices)
            if candidate < best_cost:
                best, best_cost = other, candidate
        if best != device:
            for n in nodes:
                assignment[n] = best
            moved = True
    return moved


def _edges(nodes: list[Node], members: set[Node], assignment: dict[Node, int]) -> list[tuple[int, int]]:
    """(device of the other end, bytes) for each value crossing the group's border."""
    edges = []
    for n in nodes:
        for value in n.dependencies:
            if not is_storage(value) and value not in members:
                edges.append((assignment[value], value.type.nbytes))
        readers = {assignment[u] for u, _ in n.users if u not in members}
        edges += [(d, n.type.nbytes) for d in readers]
    return edges


def _transfers(edges: list[tuple[int, int]], device: int, devices: Sequence[Device]) -> float:
    return sum(
        transfer_seconds(nbytes, devices[device], devices[other])
        for other, nbytes in edges
        if other != device
    )
