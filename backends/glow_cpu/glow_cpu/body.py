"""The program's body and entry point: ``glow_body(constants, placeholders, activations,
tid)`` calls every step's kernel phases in order (each thread through the same sequence,
parallel phases claimed part by part, serial ones on thread 0, a predicated step only where
its bool is set), split into parts of ``BODY_CHUNK`` steps; ``glow_entry`` runs it on the
calling thread and the worker pool (``workers.py``). ``codegen.build_program`` decides the
steps; this file only lays their calls out. A run of steps that repeats (an unrolled
recurrence) is called from a loop over a table of its addresses (``body_loops.py``).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.body_loops import LoopTable, Run, find_runs
from glow_cpu.claims import Claims
from glow_cpu.emit import Layout, intrinsic, mark_function
from glow_cpu.loops import I8, I32, I64, PTR, VOID, for_range, i32, i64
from glow_cpu.spin import wait_until
from glow_cpu.workers import emit_pooled_entry

if TYPE_CHECKING:
    from glow_cpu.codegen import Step

ENTRY = "glow_entry"
TICKS = "glow_ticks"


BODY_CHUNK = 256
"""Calls per part of the body (a loop counts one period's): ``glow_body`` calls its parts in
order. One function with thousands of calls makes LLVM's code generation superlinear."""

LOOPS = True
"""Whether repeated runs of steps are called from loops (tests turn it off to compare)."""


def emit_body(
    module: ir.Module,
    steps: list[Step],
    threads: int,
    parts: int,
    profile: bool,
    scratch_base: int,
    layout: Layout,
) -> None:
    body_type = ir.FunctionType(VOID, [PTR, PTR, PTR, I32])
    fn = ir.Function(module, body_type, "glow_body")
    fn.linkage = "internal"
    mark_function(fn)
    ticks = _ticks_global(module, len(steps)) if profile else None
    barrier = _barrier_function(module, threads) if threads > 1 else None
    claims = Claims(module, parts, sum(len(s.phases) for s in steps), threads) if threads > 1 else None
    body = _BodyEmitter(scratch_base, layout, ticks, barrier, claims)
    segments = _segments(steps)
    parts = _parts(segments)
    if len(parts) == 1:
        body.emit(fn, steps, parts[0])
        return
    # The claims' state (which phase to wait for) carries from one part into the next: the
    # parts run one after the other on every thread, as the single body would.
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for number, segments_of_part in enumerate(parts):
        part = ir.Function(module, body_type, f"glow_body.{number}")
        part.linkage = "internal"
        mark_function(part)
        part.attributes.add("noinline")
        body.emit(part, steps, segments_of_part)
        b.call(part, fn.args)
    b.ret_void()


def _segments(steps: list[Step]) -> list[Run]:
    """The body in order: each repeated run (called from a loop), each other step alone."""
    runs = find_runs(steps) if LOOPS else []
    segments: list[Run] = []
    cursor = 0
    for run in [*runs, Run(len(steps), 1, 0)]:
        segments += [Run(i, 1, 1) for i in range(cursor, run.first)]
        if run.repeats:
            segments.append(run)
        cursor = run.end
    return segments


def _parts(segments: list[Run]) -> list[list[Run]]:
    """Segments grouped into parts of at most ``BODY_CHUNK`` emitted calls (one per step,
    one period's per loop), a segment never cut."""
    parts: list[list[Run]] = [[]]
    size = 0
    for segment in segments:
        if parts[-1] and size + segment.period > BODY_CHUNK:
            parts.append([])
            size = 0
        parts[-1].append(segment)
        size += segment.period
    return parts


@dataclass
class _BodyEmitter:
    """Emits steps into a body function (or one part of it)."""

    scratch_base: int
    layout: Layout
    ticks: ir.GlobalVariable | None
    barrier: ir.Function | None
    claims: Claims | None
    # The function being emitted: (function, its three regions, tid, [shared, private]
    # scratch pointers, whether tid is 0), set by ``emit``.
    _context: tuple = field(default=(), init=False)

    def emit(self, fn: ir.Function, steps: list[Step], segments: list[Run]) -> None:
        """Emit ``segments`` of ``steps`` as the whole of ``fn``."""
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        regions, tid = fn.args[:3], fn.args[3]
        shared = b.gep(regions[2], [i64(self.scratch_base)], source_etype=I8)
        private_base = self.scratch_base + self.layout.shared_scratch
        private_offset = b.add(i64(private_base), b.mul(b.zext(tid, I64), i64(self.layout.private_scratch)))
        private = b.gep(regions[2], [private_offset], source_etype=I8)
        self._context = (fn, regions, tid, [shared, private], b.icmp_unsigned("==", tid, i32(0)))
        if self.ticks is not None and (not segments or segments[0].first == 0):
            _record_tick(b, self.ticks, i64(0), self._context[4])
        for segment in segments:
            if segment.repeats == 1:
                self._step(b, steps[segment.first], segment.first)
            else:
                self._loop(b, steps, segment)
        b.ret_void()

    def _step(self, b: ir.IRBuilder, step: Step, number: int) -> None:
        """One step's calls, its addresses constants."""
        fn, regions, _, scratch, _ = self._context
        claims, barrier = self.claims, self.barrier
        pointers = [b.gep(regions[r], [i64(off)], source_etype=I8) for r, off in step.addresses]
        packed = b.gep(regions[0], [i64(step.packed_offset)], source_etype=I8)
        args = [*pointers, packed, *scratch]
        skip = None
        if step.predicate is not None:
            if claims is not None:
                claims.wait_previous(b)  # the predicate may come from the kernel just before
            region, offset = step.predicate
            flag = b.load(b.gep(regions[region], [i64(offset)], source_etype=I8), typ=I8)
            run, skip = fn.append_basic_block(f"run_{number}"), fn.append_basic_block(f"after_{number}")
            b.cbranch(b.icmp_unsigned("!=", flag, ir.Constant(I8, 0)), run, skip)
            b.position_at_end(run)
        for phase in step.phases:
            self._call(b, phase.fn, args, phase.parallel)
        if skip is not None:
            if claims is not None:
                claims.wait_previous(b)
            b.branch(skip)
            b.position_at_end(skip)
            if barrier is not None:
                # Every thread has read the flag (and run the kernel or not) before a
                # later kernel may reuse the flag's bytes.
                b.call(barrier, [])
        self._tick(b, i64(number + 1))

    def _loop(self, b: ir.IRBuilder, steps: list[Step], run: Run) -> None:
        """A repeated run: one period's calls in a loop, addresses (and any kernel that
        varies) read from the run's table by iteration."""
        regions, scratch = self._context[1], self._context[3]
        table = LoopTable(b.module, f"glow_loop.{run.first}", steps, run)
        pattern = steps[run.first : run.first + run.period]
        per_iteration = sum(len(s.phases) for s in pattern)
        if self.claims is not None:
            self.claims.wait_previous(b)  # once, not in every iteration
        with for_range(b, run.repeats, name=f"loop{run.first}", vectorize=False) as iteration:
            looping = (
                self.claims.loop(b, iteration, per_iteration, run.repeats) if self.claims else nullcontext()
            )
            with looping:
                for j, step in enumerate(pattern):
                    count = len(step.addresses)
                    offsets = [table.offset(b, iteration, j, a) for a in range(count + 1)]
                    pointers = [
                        b.gep(regions[r], [offset], source_etype=I8)
                        for (r, _), offset in zip(step.addresses, offsets, strict=False)
                    ]
                    packed = b.gep(regions[0], [offsets[count]], source_etype=I8)
                    args = [*pointers, packed, *scratch]
                    for q, phase in enumerate(step.phases):
                        self._call(b, table.callee(b, iteration, j, q), args, phase.parallel)
                    if self.ticks is not None:
                        number = b.add(b.mul(iteration, i64(run.period)), i64(run.first + j + 1))
                        self._tick(b, number)

    def _call(self, b: ir.IRBuilder, callee: ir.Value, args: list[ir.Value], parallel: bool) -> None:
        tid, is_main = self._context[2], self._context[4]
        if self.claims is None:
            b.call(callee, [*args, tid])
        else:
            self.claims.run(b, callee, args, parallel, is_main, tid)

    def _tick(self, b: ir.IRBuilder, slot: ir.Value) -> None:
        if self.ticks is not None:
            if self.claims is not None:
                self.claims.wait_previous(b)
            _record_tick(b, self.ticks, slot, self._context[4])


def _ticks_global(module: ir.Module, steps: int) -> ir.GlobalVariable:
    ticks = ir.GlobalVariable(module, ir.ArrayType(I64, steps + 1), TICKS)
    ticks.initializer = ir.Constant(ticks.value_type, None)
    return ticks


def _record_tick(b: ir.IRBuilder, ticks: ir.GlobalVariable, slot: ir.Value, is_main: ir.Value) -> None:
    counter = intrinsic(b.module, "llvm.readcyclecounter", I64, [])
    with b.if_then(is_main):
        b.store(b.call(counter, []), b.gep(_opaque(b, ticks), [slot], source_etype=I64))


def _barrier_function(module: ir.Module, threads: int) -> ir.Function:
    """A sense-counting spin barrier for ``threads`` threads over a module global."""
    state = ir.GlobalVariable(module, ir.ArrayType(I32, 16), "glow_barrier_state")
    state.linkage = "internal"
    state.initializer = ir.Constant(state.value_type, None)
    count = state.gep([i32(0), i32(0)])
    generation = state.gep([i32(0), i32(8)])  # another cache line's half: less false sharing
    fn = ir.Function(module, ir.FunctionType(VOID, []), "glow_barrier")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gen = b.load_atomic(generation, "acquire", 4, typ=I32)
    arrived = b.atomic_rmw("add", count, i32(1), "acq_rel")
    last, wait = fn.append_basic_block("last"), fn.append_basic_block("wait")
    b.cbranch(b.icmp_unsigned("==", arrived, i32(threads - 1)), last, wait)
    b.position_at_end(last)
    b.store_atomic(i32(0), count, "monotonic", 4)
    b.atomic_rmw("add", generation, i32(1), "release")
    b.ret_void()
    b.position_at_end(wait)
    wait_until(b, generation, lambda now: b.icmp_unsigned("!=", now, gen), "barrier")
    b.ret_void()
    return fn


def emit_entry(module: ir.Module, threads: int) -> None:
    body = module.globals["glow_body"]
    entry = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, PTR]), ENTRY)
    mark_function(entry)
    if threads > 1:
        emit_pooled_entry(module, entry, body, threads)
        return
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    b.call(body, [*entry.args, i32(0)])
    b.ret_void()


def _opaque(b: ir.IRBuilder, typed: ir.Value) -> ir.Value:
    """The same address as an opaque ``ptr`` (llvmlite's alloca results are typed pointers)."""
    return b.inttoptr(b.ptrtoint(typed, I64), PTR)
