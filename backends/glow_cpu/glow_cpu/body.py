"""The program's body and entry point: ``glow_body(constants, placeholders, activations,
tid)`` calls every step's kernel phases in order (each thread through the same sequence,
parallel phases claimed part by part, serial ones on thread 0, a predicated step only where
its bool is set), split into parts of ``BODY_CHUNK`` steps; ``glow_entry`` runs it on the
calling thread and the worker pool (``workers.py``). ``codegen.build_program`` decides the
steps; this file only lays their calls out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.claims import Claims
from glow_cpu.emit import Layout, intrinsic, mark_function
from glow_cpu.loops import I8, I32, I64, PTR, VOID, i32, i64
from glow_cpu.spin import wait_until
from glow_cpu.workers import emit_pooled_entry

if TYPE_CHECKING:
    from glow_cpu.codegen import Step

ENTRY = "glow_entry"
TICKS = "glow_ticks"


BODY_CHUNK = 256
"""Steps per part of the body: ``glow_body`` calls its parts in order. One function with
thousands of calls (an unrolled recurrence) makes LLVM's code generation superlinear."""


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
    claims = Claims(module, parts, sum(len(s.phases) for s in steps)) if threads > 1 else None
    body = _BodyEmitter(scratch_base, layout, ticks, barrier, claims)
    if len(steps) <= BODY_CHUNK:
        body.emit(fn, steps, 0)
        return
    # The claims' state (which phase to wait for) carries from one part into the next: the
    # parts run one after the other on every thread, as the single body would.
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for first in range(0, len(steps), BODY_CHUNK):
        part = ir.Function(module, body_type, f"glow_body.{first // BODY_CHUNK}")
        part.linkage = "internal"
        mark_function(part)
        part.attributes.add("noinline")
        body.emit(part, steps[first : first + BODY_CHUNK], first)
        b.call(part, fn.args)
    b.ret_void()


@dataclass
class _BodyEmitter:
    """Emits steps into a body function (or one part of it)."""

    scratch_base: int
    layout: Layout
    ticks: ir.GlobalVariable | None
    barrier: ir.Function | None
    claims: Claims | None

    def emit(self, fn: ir.Function, steps: list[Step], first: int) -> None:
        """Emit ``steps`` (numbered from ``first``) as the whole of ``fn``."""
        claims, barrier, ticks, layout = self.claims, self.barrier, self.ticks, self.layout
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        regions, tid = fn.args[:3], fn.args[3]
        shared = b.gep(regions[2], [i64(self.scratch_base)], source_etype=I8)
        private_base = self.scratch_base + layout.shared_scratch
        private_offset = b.add(i64(private_base), b.mul(b.zext(tid, I64), i64(layout.private_scratch)))
        private = b.gep(regions[2], [private_offset], source_etype=I8)
        is_main = b.icmp_unsigned("==", tid, i32(0))
        if ticks is not None and first == 0:
            _record_tick(b, ticks, 0, is_main)
        for number, step in enumerate(steps, start=first):
            pointers = [b.gep(regions[r], [i64(off)], source_etype=I8) for r, off in step.addresses]
            packed = b.gep(regions[0], [i64(step.packed_offset)], source_etype=I8)
            args = [*pointers, packed, shared, private]
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
                if claims is None:
                    b.call(phase.fn, [*args, tid])
                else:
                    claims.run(b, phase.fn, args, phase.parallel, is_main)
            if skip is not None:
                if claims is not None:
                    claims.wait_previous(b)
                b.branch(skip)
                b.position_at_end(skip)
                if barrier is not None:
                    # Every thread has read the flag (and run the kernel or not) before a
                    # later kernel may reuse the flag's bytes.
                    b.call(barrier, [])
            if ticks is not None:
                if claims is not None:
                    claims.wait_previous(b)
                _record_tick(b, ticks, number + 1, is_main)
        b.ret_void()


def _ticks_global(module: ir.Module, steps: int) -> ir.GlobalVariable:
    ticks = ir.GlobalVariable(module, ir.ArrayType(I64, steps + 1), TICKS)
    ticks.initializer = ir.Constant(ticks.value_type, None)
    return ticks


def _record_tick(b: ir.IRBuilder, ticks: ir.GlobalVariable, slot: int, is_main: ir.Value) -> None:
    counter = intrinsic(b.module, "llvm.readcyclecounter", I64, [])
    with b.if_then(is_main):
        b.store(b.call(counter, []), b.gep(_opaque(b, ticks), [i64(slot)], source_etype=I64))


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
