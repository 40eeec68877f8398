"""Static memory planning into three regions, as an AOT bundle exposes them to C.

- constants: every constant weight, packed once;
- placeholders: every input and output;
- activations: one arena; each buffer gets an offset so that two buffers live at the same
  time never overlap (live = from its alloc to its dealloc).

The activation plan is a greedy best fit (largest buffers first, each at the lowest offset
that does not collide with a placed buffer of overlapping lifetime). The figures to report
are the arena size against the sum of all buffers and against the peak live set, which no
plan can beat.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glow_core.errors import VerifyError
from glow_core.ir.instructions import AllocActivation, DeallocActivation, IRFunction, WeightKind
from glow_core.limits import current_limits

ALIGNMENT = 64  # a cache line, and the widest vector a CPU backend loads


def align(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class Interval:
    """Where and when one activation buffer lives: bytes [offset, offset+size), instrs [start, end]."""

    name: str
    offset: int
    size: int
    start: int
    end: int

    def overlaps_in_time(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end

    def overlaps_in_space(self, other: Interval) -> bool:
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


@dataclass
class MemoryPlan:
    """Offsets per region and the figures that judge the plan."""

    constant_offsets: dict[str, int] = field(default_factory=dict)
    placeholder_offsets: dict[str, int] = field(default_factory=dict)
    activations: dict[str, Interval] = field(default_factory=dict)
    constant_bytes: int = 0
    placeholder_bytes: int = 0
    arena_bytes: int = 0
    activation_bytes_total: int = 0
    peak_live_bytes: int = 0

    def offset_of(self, name: str) -> int:
        return self.activations[name].offset

    def summary(self) -> str:
        return (
            f"constants {self.constant_bytes} B, placeholders {self.placeholder_bytes} B, "
            f"activation arena {self.arena_bytes} B (sum of buffers {self.activation_bytes_total} B, "
            f"peak live {self.peak_live_bytes} B)"
        )


def _pack(sizes: list[tuple[str, int]]) -> tuple[dict[str, int], int]:
    offsets, cursor = {}, 0
    for name, size in sizes:
        offsets[name] = cursor
        cursor += align(size)
    return offsets, cursor


def lifetimes(ir: IRFunction) -> list[tuple[AllocActivation, int, int]]:
    """(alloc, alloc position, dealloc position) for every activation buffer."""
    start: dict[AllocActivation, int] = {}
    spans = []
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation):
            start[instr] = index
        elif isinstance(instr, DeallocActivation):
            alloc = instr.alloc
            if alloc not in start:
                raise VerifyError(f"dealloc of {alloc.name!r} before its alloc")
            spans.append((alloc, start.pop(alloc), index))
    if start:
        raise VerifyError(f"buffers never deallocated: {[a.name for a in start]}")
    return spans


def plan_memory(ir: IRFunction) -> MemoryPlan:
    """Offsets for every weight and activation of ``ir``, refused (``MemoryLimitError``)
    when one buffer or the whole plan is over the budget of ``glow_core.limits``: the plan
    is only numbers, so this is the last check before a backend allocates."""
    spans = lifetimes(ir)
    limits = current_limits()
    for buffer in [*ir.weights, *(alloc for alloc, _, _ in spans)]:
        what = f"buffer {buffer.name!r} of function {ir.name!r}"
        limits.check_tensor(what, buffer.type.shape, buffer.type.elem.itemsize)
    plan = MemoryPlan()
    plan.constant_offsets, plan.constant_bytes = _pack([(w.name, w.type.nbytes) for w in ir.constants])
    public = [w for w in ir.weights if w.kind is not WeightKind.CONSTANT]
    plan.placeholder_offsets, plan.placeholder_bytes = _pack([(w.name, w.type.nbytes) for w in public])
    placed: list[Interval] = []
    table = _Placed(len(spans))
    for alloc, start, end in sorted(spans, key=lambda s: (-s[0].type.nbytes, s[1])):
        size = align(max(alloc.type.nbytes, 1))
        offset = table.lowest_free_offset(size, start, end)
        table.add(offset, size, start, end)
        placed.append(Interval(alloc.name, offset, size, start, end))
    plan.activations = {i.name: i for i in placed}
    plan.arena_bytes = max((i.offset + i.size for i in placed), default=0)
    plan.activation_bytes_total = sum(i.size for i in placed)
    plan.peak_live_bytes = _peak_live(placed)
    total = plan.constant_bytes + plan.placeholder_bytes + plan.arena_bytes
    limits.check_total(f"the memory plan of function {ir.name!r}", total, plan.summary())
    return plan


class _Placed:
    """The intervals placed so far as columns, so finding those alive at the same time is
    one vectorized test instead of a Python loop over every buffer (quadratic: minutes for
    the thousands of buffers of an unrolled recurrence)."""

    def __init__(self, capacity: int):
        self.columns = np.zeros((4, max(capacity, 1)), np.int64)  # offset, end, start, stop
        self.count = 0

    def add(self, offset: int, size: int, start: int, end: int) -> None:
        self.columns[:, self.count] = (offset, offset + size, start, end)
        self.count += 1

    def lowest_free_offset(self, size: int, start: int, end: int) -> int:
        """The lowest offset where ``size`` bytes fit beside every placed buffer whose
        instructions ``[start, stop]`` overlap ``[start, end]`` (first fit)."""
        lo, hi, starts, stops = self.columns[:, : self.count]
        alive = (starts <= end) & (start <= stops)
        lo, hi = lo[alive], hi[alive]
        order = np.lexsort((hi, lo))  # by offset, then end
        offset = 0
        for busy_lo, busy_hi in zip(lo[order].tolist(), hi[order].tolist(), strict=True):
            if offset + size <= busy_lo:
                break
            offset = max(offset, busy_hi)
        return offset


def _peak_live(intervals: list[Interval]) -> int:
    events = sorted([(i.start, i.size) for i in intervals] + [(i.end + 1, -i.size) for i in intervals])
    peak = live = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def check_plan(plan: MemoryPlan) -> None:
    """Raise VerifyError if two buffers alive at once share a byte."""
    items = list(plan.activations.values())
    for a_index, a in enumerate(items):
        for b in items[a_index + 1 :]:
            if a.overlaps_in_time(b) and a.overlaps_in_space(b):
                raise VerifyError(f"buffers {a.name!r} and {b.name!r} overlap in memory while both live")
