"""The partitioner: the optimized graph and a device list -> a PartitionPlan, phase by phase.

1. *support* (and *by hand*): a high-level node that an earlier device runs only in part
   is lowered first; then each node goes to the device the options name, else to the
   first device that runs it after its own lowering decisions; none: refused.
2. *DAG*: nodes of one device merge into groups that form a DAG (``dag``).
3. *cost*: islands whose transfers cost more than they save move to a neighbour device,
   and the groups are formed again, until nothing moves (``cost``).
4. *memory*: a group over its device's capacity is cut in schedule order; pieces go to
   devices of the same backend with room left (``memory``).

``alternate=N`` (a testing aid, ``alternate``) replaces the cost phase: the schedule is cut
into N stretches that take turns between the first and the last device.

Output Saves follow the node they save. Each phase is a function of plain data, tested
on its own on built graphs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from glow_core.graph.function import Function
from glow_core.graph.node import Node, Placeholder, is_storage
from glow_core.partition import cost, memory
from glow_core.partition.alternate import alternate as alternate_stretches
from glow_core.partition.alternate import check_stretches
from glow_core.partition.dag import group_by_level
from glow_core.partition.manual import Assignment, assign_by_hand
from glow_core.partition.plan import Boundary, Device, Partition, PartitionPlan
from glow_core.partition.support import SupportTable, assign_by_support, lower_for_split
from glow_core.schedule import schedule

MAX_MERGE_ROUNDS = 16
"""Island merging stops after this many rounds even if something still moves (it rarely
takes more than two; the cap only guards against two islands trading places forever)."""


def partition_function(
    fn: Function,
    devices: Sequence[Device],
    *,
    by_hand: Assignment | None = None,
    merge_islands: bool = True,
    alternate: int | None = None,
) -> PartitionPlan:
    """Split the optimized function ``fn`` across ``devices`` (the caller's order); ``fn``
    may be edited (nodes lowered where devices share them). ``alternate=N`` forces N
    stretches alternating between the first and the last device (``alternate``)."""
    start = time.perf_counter()
    if alternate is not None:
        check_stretches(alternate)
    table = SupportTable(devices)
    if len(devices) > 1:
        lower_for_split(fn, table)  # each partition is optimized again when it compiles
    order = schedule(fn)
    pinned = assign_by_hand(order, by_hand, devices, table) if by_hand else {}
    assignment = _assign(order, table, pinned)
    if alternate is not None:
        alternate_stretches(order, assignment, table, alternate, pinned)
        _follow_saves(order, assignment)
    groups = group_by_level(order, assignment)
    if merge_islands and alternate is None and len(devices) > 1:
        costs: dict[tuple[Node, int], float] = {}
        for _ in range(MAX_MERGE_ROUNDS):
            runs = lambda node, index: table.runs(node, devices[index])  # noqa: E731
            if not cost.merge_islands(groups, assignment, devices, runs, set(pinned), costs):
                break
            _follow_saves(order, assignment)
            groups = group_by_level(order, assignment)
    pieces: list[tuple[int, list[Node]]] = []
    for device_index, nodes in groups:
        device = devices[device_index]
        capacity = device.capacity
        if capacity is not None and memory.need(nodes) > capacity:
            pieces += [(device_index, p) for p in memory.split_to_fit(nodes, capacity, device)]
        else:
            pieces.append((device_index, nodes))
    placed = memory.place(pieces, devices)
    plan = build_plan(fn, devices, [(d, nodes) for d, (_, nodes) in zip(placed, pieces, strict=True)])
    plan.seconds = time.perf_counter() - start
    return plan


def _assign(order: Sequence[Node], table: SupportTable, pinned: dict[Node, int]) -> dict[Node, int]:
    """By hand where given, else the first device that runs the node; refuses the rest."""
    assignment = assign_by_support(order, table, pinned)
    _follow_saves(order, assignment)
    return assignment


def _follow_saves(order: Sequence[Node], assignment: dict[Node, int]) -> None:
    """An output's Save runs where its value is computed (the first device for storage)."""
    for node in order:
        if node.kind == "Save":
            value = node.inputs[0]
            assignment[node] = 0 if is_storage(value) else assignment[value]


def build_plan(
    fn: Function, devices: Sequence[Device], pieces: Sequence[tuple[int, list[Node]]]
) -> PartitionPlan:
    """Partitions with their reads, writes, dependencies and figures from placed pieces
    (listed in a dependency order)."""
    owner: dict[Node, int] = {n: index for index, (_, nodes) in enumerate(pieces) for n in nodes}
    partitions = [Partition(index, devices[d], nodes) for index, (d, nodes) in enumerate(pieces)]
    consumers: dict[Node, set[int]] = {}
    for p in partitions:
        reads: dict[str, None] = {}
        for n in p.nodes:
            for value in n.dependencies:
                if isinstance(value, Placeholder) and not value.is_output:
                    reads[value.name] = None
                elif not is_storage(value) and owner[value] != p.index:
                    reads[value.name] = None
                    consumers.setdefault(value, set()).add(p.index)
                    p.after.add(owner[value])
            if n.kind == "Save":
                p.writes.append(n.inputs[1].name)
        p.reads = list(reads)
    boundaries: dict[str, Boundary] = {}
    for value, readers in consumers.items():
        producer = partitions[owner[value]]
        producer.writes.append(value.name)
        boundaries[value.name] = Boundary(value.name, value.type, producer.index, tuple(sorted(readers)))
    for p in partitions:
        p.flops = sum(cost.flops(n) for n in p.nodes)
        p.constant_bytes, p.placeholder_bytes, p.arena_bytes = memory.footprint(p.nodes)
        p.boundary_bytes = sum(boundaries[t].nbytes for t in (*p.reads, *p.writes) if t in boundaries)
    return PartitionPlan(fn, list(devices), partitions, boundaries)
