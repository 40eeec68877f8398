"""Repeated runs of steps in the body, called from a loop over a constant table.

An unrolled recurrence (an ONNX GRU/LSTM/RNN over a few dozen steps, a Loop with a static
trip count) schedules the same handful of instructions once per time step: their kernels
are shared (``codegen.kernel_key``), and only their operands' addresses differ. Calling
them one call instruction per step made the body tens of thousands of calls, and the body
module the slowest of the whole compile (``gru_text``: 13610 calls, most of the machine
code time). Here such a run is found (``find_runs``) and called from a loop: each
iteration calls one period's kernels with addresses read from a constant table
(``LoopTable``), one row per iteration. A column that is the same in every iteration (a
weight, the shared kernel itself) is a constant in the loop, and one that grows by the same
stride every iteration (a time step's slice of a sequence) is computed from the iteration
number, so the table holds only what really varies (buffers the memory plan reuses). A
kernel that differs between iterations (a Slice whose start is an attribute) is called
through a table of function pointers.

The calls made, their order and their arguments are exactly those of the unrolled body:
the same kernels, the same memory plan, the same phase numbers for the claims of a
threaded body; only how the body computes each address changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir

from glow_cpu.loops import I8, I32, I64, PTR, i64

if TYPE_CHECKING:
    from glow_cpu.codegen import Step

MAX_PERIOD = 128
"""The longest period (steps per iteration) looked for: an unrolled GRU step is about 20
instructions, both directions of a layer interleaved about 40."""

MIN_LOOP_STEPS = 16
"""A run is called from a loop only if it covers at least this many steps (and repeats at
least twice): a shorter one costs more in its table and loop than it saves in calls."""


@dataclass(frozen=True)
class Run:
    """Steps ``first .. first + period * repeats - 1`` repeat one period ``repeats`` times."""

    first: int
    period: int
    repeats: int

    @property
    def end(self) -> int:
        return self.first + self.period * self.repeats


def _signature(step: Step, index: int) -> tuple:
    """What must agree for two steps to be the same call in a loop: the region of every
    operand and the phases' function types and parallelism. A predicated step is never
    looped (its own index makes its signature unique)."""
    if step.predicate is not None:
        return ("predicated", index)
    return (
        tuple(region for region, _ in step.addresses),
        tuple((str(p.fn.ftype), p.parallel) for p in step.phases),
    )


def find_runs(steps: list[Step], max_period: int = MAX_PERIOD, min_steps: int = MIN_LOOP_STEPS) -> list[Run]:
    """The runs to call from loops, left to right, none overlapping.

    Greedy: at each step, the period (up to ``max_period``) whose repetition from there
    covers the most steps wins if it covers at least ``min_steps``; otherwise the step is
    called on its own and the search moves one step on. For each period, how many steps
    from each position on equal the step a period later is one vectorized pass, so the
    search takes time linear in the number of steps times ``max_period``, and memory
    linear in the steps.
    """
    count = len(steps)
    if count < min_steps:
        return []
    ids: dict[tuple, int] = {}
    tokens = np.array([ids.setdefault(_signature(s, i), len(ids)) for i, s in enumerate(steps)])
    periods = min(max_period, count // 2)
    # best_covered[i]: the most steps covered from i by repeating one period (whole periods
    # only), best_period[i] the smallest period that covers them
    best_covered = np.zeros(count, dtype=np.int64)
    best_period = np.ones(count, dtype=np.int64)
    positions = np.arange(count)
    for p in range(1, periods + 1):
        same = np.zeros(count, dtype=bool)
        same[: count - p] = tokens[: count - p] == tokens[p:]
        # the first index >= i where the step differs from the one p later
        breaks = np.where(same, count, positions)
        next_break = np.minimum.accumulate(breaks[::-1])[::-1]
        covered = ((next_break - positions) // p + 1) * p
        better = covered > best_covered
        best_covered[better], best_period[better] = covered[better], p
    runs: list[Run] = []
    i = 0
    while i < count:
        p, steps_covered = int(best_period[i]), int(best_covered[i])
        if steps_covered >= max(min_steps, 2 * p):
            runs.append(Run(i, p, steps_covered // p))
            i += steps_covered
        else:
            i += 1
    return runs


class LoopTable:
    """The addresses and kernels of one run, as constants or per-iteration table columns.

    ``offset(b, it, j, a)``: the byte offset of operand ``a`` of the run's ``j``-th step in
    iteration ``it`` (``a == len(addresses)``: its packed constants); ``callee(b, it, j, q)``
    the function of its phase ``q``.
    """

    def __init__(self, module: ir.Module, name: str, steps: list[Step], run: Run):
        period, repeats = run.period, run.repeats
        grid = [steps[run.first + r * period : run.first + (r + 1) * period] for r in range(repeats)]
        self._offsets: dict[tuple[int, int], tuple[int, int]] = {}  # (first, stride) offsets
        self._offset_columns: dict[tuple[int, int], int] = {}
        self._kernels: dict[tuple[int, int], ir.Function] = {}
        self._kernel_columns: dict[tuple[int, int], tuple[int, ir.FunctionType]] = {}
        offset_columns: list[np.ndarray] = []
        kernel_columns: list[list[ir.Function]] = []
        for j, step in enumerate(grid[0]):
            values = np.array(
                [[off for _, off in row[j].addresses] + [row[j].packed_offset] for row in grid],
                dtype=np.int64,
            )
            for a in range(values.shape[1]):
                column = values[:, a]
                strides = np.diff(column)
                if (strides == strides[0]).all():
                    self._offsets[(j, a)] = (int(column[0]), int(strides[0]))
                else:
                    self._offset_columns[(j, a)] = len(offset_columns)
                    offset_columns.append(column)
            for q, phase in enumerate(step.phases):
                fns = [row[j].phases[q].fn for row in grid]
                if all(fn is fns[0] for fn in fns):
                    self._kernels[(j, q)] = fns[0]
                else:
                    self._kernel_columns[(j, q)] = (len(kernel_columns), phase.fn.ftype)
                    kernel_columns.append(fns)
        self._offset_width = 0
        self._offset_table: ir.GlobalVariable | None = None
        if offset_columns:
            table = np.stack(offset_columns, axis=1)  # [repeats, columns]
            wide = int(table.max()) >= 1 << 31
            self._offset_width = 8 if wide else 4
            data = table.astype("<i8" if wide else "<i4").tobytes()
            self._offset_type = I64 if wide else I32
            self._offset_table = _constant(
                module, f"{name}.offsets", ir.ArrayType(I8, len(data)), bytearray(data)
            )
        self._offset_count = len(offset_columns)
        self._kernel_table: ir.GlobalVariable | None = None
        self._kernel_count = len(kernel_columns)
        if kernel_columns:
            flat = [fns[r] for r in range(repeats) for fns in kernel_columns]
            self._kernel_table = _constant(module, f"{name}.kernels", ir.ArrayType(PTR, len(flat)), flat)

    def offset(self, b: ir.IRBuilder, iteration: ir.Value, j: int, a: int) -> ir.Value:
        affine = self._offsets.get((j, a))
        if affine is not None:
            first, stride = affine
            return i64(first) if stride == 0 else b.add(i64(first), b.mul(iteration, i64(stride)))
        column = self._offset_columns[(j, a)]
        index = b.add(b.mul(iteration, i64(self._offset_count)), i64(column))
        byte = b.mul(index, i64(self._offset_width))
        value = b.load(b.gep(self._offset_table, [i64(0), byte]), typ=self._offset_type)
        return value if self._offset_type is I64 else b.zext(value, I64)

    def callee(self, b: ir.IRBuilder, iteration: ir.Value, j: int, q: int) -> ir.Value:
        fn = self._kernels.get((j, q))
        if fn is not None:
            return fn
        column, ftype = self._kernel_columns[(j, q)]
        index = b.add(b.mul(iteration, i64(self._kernel_count)), i64(column))
        # A pointer typed with the function's type: llvmlite reads the call's signature from it.
        return b.load(b.gep(self._kernel_table, [i64(0), index]), typ=ir.PointerType(ftype))


def _constant(module: ir.Module, name: str, typ: ir.ArrayType, value: object) -> ir.GlobalVariable:
    table = ir.GlobalVariable(module, typ, name)
    table.linkage = "internal"
    table.global_constant = True
    table.initializer = ir.Constant(typ, value)
    table.align = 8
    return table
