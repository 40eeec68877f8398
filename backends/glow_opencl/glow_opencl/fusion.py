"""Fusing runs of consecutive scalar instructions (element-wise, Splat, Broadcast, Convert,
Compare, Select) into one kernel, so a chain such as ``Add -> Max`` reads and writes memory
once; and recomputing cheap values from read-only memory in their readers (``inlinable``).

A run is fused when

1. every member has the same result shape (one work-item per element ``i`` of it);
2. every value a member produces, except the last member's result, dies inside the run: no
   instruction after the run reads its buffer, it is no function output, and members read it
   directly (not through a view), so it never needs to be written to memory at all;
3. writing the run's result cannot clobber an operand another work-item has not read yet.
   The memory plan was made for the *unfused* order, where an operand of an early member may
   die before the last member's result is allocated, and so may share its bytes. The fused
   kernel is safe only when each operand's bytes are disjoint from the result's, or are the
   very same elements (read at ``i`` before ``i`` is written, by the same work-item).

The longest fusable run starting at each instruction wins (greedy, capped).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glow_core.ir.instructions import AllocActivation, Instr, Role, TensorView, Value, WeightKind, WeightVar
from glow_opencl.emit import EMIT
from glow_opencl.source import Kernel, Param, ctype, linear_kernel, load, store

MAX_RUN = 32


@dataclass(frozen=True)
class Address:
    """Where a value's bytes are: a region ("constants", "placeholders", "activations") and a range."""

    region: str
    offset: int
    nbytes: int

    def overlaps(self, other: Address) -> bool:
        return (
            self.region == other.region
            and self.offset < other.offset + other.nbytes
            and other.offset < self.offset + self.nbytes
        )


def is_scalar(instr: Instr) -> bool:
    entry = EMIT.get(instr.kind)
    return entry is not None and entry.scalar is not None


def _reads(instr: Instr) -> list[Value]:
    return [v for v, r in instr.operands if r is not Role.OUT]


def last_reads(compute: list[Instr]) -> dict[Value, int]:
    """Position of the last instruction reading each root buffer; outputs count as read at the end."""
    last: dict[Value, int] = {}
    for pos, instr in enumerate(compute):
        for v in _reads(instr):
            last[v.root] = pos
        for v, _ in instr.operands:
            if isinstance(v.root, WeightVar) and v.root.kind is WeightKind.OUTPUT:
                last[v.root] = len(compute)
    return last


def _valid(
    run: list[Instr],
    end: int,
    last: dict[Value, int],
    addr: Callable[[Value], Address],
    inline: dict[Value, Instr],
) -> bool:
    """Whether ``run`` (ending at compute position ``end``) may be one kernel; see the module doc."""
    final = run[-1].dest
    written: dict[Value, Value] = {}  # root buffer -> the value members wrote it through
    external: list[tuple[Value, bool]] = []  # (operand, whether it is read at element i)
    for instr in run:
        dest, entry = instr.dest, EMIT[instr.kind]
        if dest.type.shape != final.type.shape:
            return False
        for v in instr.sources:
            if v in inline:
                continue  # recomputed from memory nobody writes
            if v.root not in written:
                external.append((v, entry.index is None))
            elif v is not written[v.root] or entry.index is not None:
                return False  # a view of, or a remapped read of, a value that is never stored
        if written.setdefault(dest.root, dest) is not dest:
            return False
        if dest is not final and not isinstance(dest, AllocActivation):
            return False  # an intermediate must be a whole activation buffer nobody else sees
    if any(root is not final.root and last.get(root, -1) > end for root in written):
        return False
    out = addr(final)
    for v, at_i in external:
        a = addr(v)
        same = at_i and a == out and v.type.elem.itemsize == final.type.elem.itemsize
        if a.overlaps(out) and not same:
            return False
    return True


def plan_runs(
    compute: list[Instr],
    addr: Callable[[Value], Address],
    inline: dict[Value, Instr],
    fuse: bool = True,
) -> list[list[Instr]]:
    """Split ``compute`` (instructions in order) into launches: fused runs and single instructions."""
    last = last_reads(compute)
    runs, pos = [], 0
    while pos < len(compute):
        best = 1
        if fuse and is_scalar(compute[pos]) and compute[pos].predicate is None:
            stop = min(len(compute), pos + MAX_RUN)
            end = pos + 1
            while end < stop and is_scalar(compute[end]) and compute[end].predicate is None:
                if _valid(compute[pos : end + 1], end, last, addr, inline):
                    best = end + 1 - pos
                end += 1
        runs.append(compute[pos : pos + best])
        pos += best
    return runs


class _RunWriter:
    """The body of a fused kernel: C variables for loaded, inlined and computed values."""

    def __init__(self, final: Value, inline: dict[Value, Instr]):
        self.inline = inline
        self.params = [Param("d", final.type.elem, writes=True)]
        self.values: list[Value] = [final]
        self.lines: list[str] = []
        self.local: dict[Value, str] = {}  # value produced in the run -> its C variable
        self.cache: dict[tuple[int, str], str] = {}  # (operand id, index) -> C variable
        self.count = 0

    def operand(self, v: Value, index: str) -> str:
        """A C variable holding element ``index`` of ``v``."""
        if v in self.local and index == "i":
            return self.local[v]
        key = (id(v), index)
        if key not in self.cache:
            if v in self.inline:
                expr = self.compute(self.inline[v], index)
            else:
                name = f"s{len(self.params) - 1}"
                self.params.append(Param(name, v.type.elem))
                self.values.append(v)
                expr = load(name, v.type.elem, index)
            self.cache[key] = f"x{self.count}"
            self.count += 1
            self.lines.append(f"const {ctype(v.type.elem)} {self.cache[key]} = {expr};")
        return self.cache[key]

    def compute(self, instr: Instr, index: str) -> str:
        """The C expression of ``instr``'s result at element ``index``."""
        entry = EMIT[instr.kind]
        flat = index if index == "i" else f"({index})"
        source_index = entry.index(instr, flat) if entry.index else index
        return entry.scalar(instr, [self.operand(v, source_index) for v in instr.sources])


def emit_run(run: list[Instr], inline: dict[Value, Instr] | None = None) -> Kernel:
    """One kernel computing every member of ``run`` per element, storing only the last result."""
    final = run[-1].dest
    w = _RunWriter(final, inline or {})
    for j, instr in enumerate(run):
        expr = w.compute(instr, "i")
        w.lines.append(f"const {ctype(instr.dest.type.elem)} t{j} = {expr};")
        w.local[instr.dest] = f"t{j}"
    w.lines.append(store("d", final.type.elem, "i", f"t{len(run) - 1}"))
    hint = "_".join(i.kind.lower() for i in run[:4]) + ("_etc" if len(run) > 4 else "")
    return linear_kernel(hint, w.params, w.values, final.type.size, w.lines)


def inlinable(compute: list[Instr]) -> dict[Value, Instr]:
    """Scalar instructions worth recomputing in every reader instead of storing: result -> producer.

    A producer qualifies when it reads only memory no instruction writes (constants, inputs),
    its result is a whole activation buffer written by it alone, and every reader is a scalar
    instruction reading that buffer directly. Bias Broadcasts and the zero Splat of a ReLU are
    the typical case: they would otherwise fill a whole feature map just to be read once.
    """
    writes: dict[Value, int] = {}
    readers: dict[Value, list[tuple[Instr, Value]]] = {}
    for instr in compute:
        for v, role in instr.operands:
            if role is not Role.IN:
                writes[v.root] = writes.get(v.root, 0) + 1
            if role is not Role.OUT:
                readers.setdefault(v.root, []).append((instr, v))
    found = {}
    for instr in compute:
        dest = instr.dest
        if (
            not is_scalar(instr)
            or not isinstance(dest, AllocActivation)
            or writes.get(dest) != 1
            or instr.predicate is not None
        ):
            continue
        if not all(_immutable(v) for v in instr.sources):
            continue
        users = readers.get(dest, [])
        if users and all(is_scalar(user) and v is dest for user, v in users):
            found[dest] = instr
    return found


def _immutable(v: Value) -> bool:
    root = v.root
    return isinstance(root, WeightVar) and root.kind in (WeightKind.CONSTANT, WeightKind.INPUT)


def root_offset(value: Value) -> tuple[Value, int]:
    """The value owning ``value``'s bytes and the byte offset of ``value`` in it."""
    offset = 0
    while isinstance(value, TensorView):
        offset += value.offset * value.source.type.elem.itemsize
        value = value.source
    return value, offset
