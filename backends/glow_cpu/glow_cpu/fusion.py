"""Which instructions the CPU backend fuses, decided on the IR before any code is emitted.

Two rewrites, both read-only on the IR (the plan says what to skip and what to fold):

- *virtual* tensors: a Splat, or a Broadcast of a constant, whose buffer only element-wise
  float32 instructions read is never materialized; each reader computes the value from the
  splat constant or from the broadcast source with zero strides (a bias added to a feature
  map reads 1 float per channel instead of a whole map).
- *epilogues*: element-wise float32 instructions that follow a producer (a Convolution,
  MatMul, BatchMatMul or another element-wise instruction) and consume its result at the
  same position are applied while the producer stores: Conv + bias + residual + ReLU is one
  pass, and so is an attention's scores product with its scale.

A chain only grows while the value it carries is not needed in memory by anyone else: each
intermediate result is in the final destination buffer (in place) or dies in the chain.
Predicated instructions take no part: they run (or not) as kernels of their own.

One more rewrite reaches past element-wise work: a *tail*, an instruction that reads the end
of its producer's chain, is its only reader and comes right after it, computed inside the
producer's kernel (an inverted residual's 1x1 expansion and 3x3 depthwise convolution,
``kernels/expand_depthwise.py``): the chain's result then never reaches memory.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from glow_core.ir.instructions import (
    MEMORY_KINDS,
    AllocActivation,
    Instr,
    IRFunction,
    Role,
    TensorView,
    Value,
    WeightKind,
    WeightVar,
)
from glow_core.types import ElemKind
from glow_cpu.chain_ops import CHAIN, Access, Op
from glow_cpu.kernels import expand_depthwise
from glow_cpu.kernels.ops import BINARY_KINDS, UNARY_KINDS, op_kind
from glow_cpu.loops import row_major_strides

ELEMENTWISE = BINARY_KINDS | UNARY_KINDS
"""The kinds a chain can apply: every kind of the scalar-operation table (``kernels/ops.py``)."""
GEMM_PRODUCERS = frozenset({"Convolution", "MatMul", "BatchMatMul"})
"""Producers whose kernels store their results through a GEMM's tiles (``gemm_tile``)."""
PRODUCERS = GEMM_PRODUCERS | ELEMENTWISE


@dataclass
class FusionPlan:
    """What codegen skips, and the epilogue each producer applies as it stores."""

    skipped: set[int] = field(default_factory=set)  # id() of instructions not emitted
    epilogues: dict[int, list[Op]] = field(default_factory=dict)  # id(producer) -> ops after it
    final_dest: dict[int, Value] = field(default_factory=dict)  # id(producer) -> where the chain stores
    virtual: dict[int, Access] = field(default_factory=dict)  # id(buffer) -> how to compute it
    tails: dict[int, Instr] = field(default_factory=dict)  # id(producer) -> instruction run in its kernel

    def access(self, value: Value, shape: tuple[int, ...]) -> Access:
        """How an element-wise reader of ``shape`` reads ``value``."""
        if id(value) in self.virtual:
            return self.virtual[id(value)]
        return Access("buffer", value, row_major_strides(shape))


def _is_f32_elementwise(instr: Instr) -> bool:
    return instr.kind in ELEMENTWISE and instr.dest.type.elem is ElemKind.float32 and instr.predicate is None


def _uses(ir: IRFunction, values: set[int]) -> tuple[dict[int, list[Instr]], dict[int, int]]:
    """For the values whose id() is in ``values``: the instructions reading each (directly,
    not through views), and how many instructions write each (as @out or @inout).

    Only the Splat and Broadcast results can become virtual, so only theirs are collected,
    in one walk over the operands.
    """
    readers: dict[int, list[Instr]] = {}
    writes: dict[int, int] = {}
    for instr in ir.instrs:
        if instr.kind in MEMORY_KINDS:
            continue
        for value, role in instr.operands:
            key = id(value)
            if key not in values:
                continue
            if role is Role.IN:
                readers.setdefault(key, []).append(instr)
            elif role is Role.OUT or role is Role.INOUT:
                writes[key] = writes.get(key, 0) + 1
    return readers, writes


def _viewed(ir: IRFunction) -> set[int]:
    return {id(i.source) for i in ir.instrs if isinstance(i, TensorView)}


def _constant_root(value: Value) -> bool:
    while isinstance(value, TensorView):
        value = value.source
    return isinstance(value, WeightVar) and value.kind is WeightKind.CONSTANT


def _virtual(instr: Instr, readers: list[Instr]) -> Access | None:
    """The Access replacing ``instr``'s result for its readers, or None to keep it."""
    dest = instr.dest
    if not isinstance(dest, AllocActivation) or dest.type.elem is not ElemKind.float32 or not readers:
        return None
    if not all(_is_f32_elementwise(r) and r.dest.type.shape == dest.type.shape for r in readers):
        return None
    if instr.kind == "Splat":
        return Access("splat", constant=float(instr.attrs["value"]))
    if instr.kind == "Broadcast" and _constant_root(instr.sources[0]):
        source = instr.sources[0]
        shape = dest.type.shape
        padded = (1,) * (len(shape) - source.type.rank) + source.type.shape
        strides = [0 if n == 1 else s for n, s in zip(padded, row_major_strides(padded), strict=True)]
        return Access("buffer", source, tuple(strides))
    return None


def plan_fusion(ir: IRFunction) -> FusionPlan:
    """The fusion plan of ``ir`` (see the module docstring)."""
    plan = FusionPlan()
    splats = [i for i in ir.instrs if i.kind in ("Splat", "Broadcast")]
    readers, writes = _uses(ir, {id(i.dest) for i in splats})
    viewed = _viewed(ir)
    for instr in splats:
        if (
            id(instr.dest) not in viewed
            and writes[id(instr.dest)] == 1  # not a buffer an in-place instruction reuses later
            and instr.predicate is None
        ):
            access = _virtual(instr, readers.get(id(instr.dest), []))
            if access is not None:
                plan.virtual[id(instr.dest)] = access
                plan.skipped.add(id(instr))
    compute = [i for i in ir.instrs if i.kind not in MEMORY_KINDS and id(i) not in plan.skipped]
    last_read = {}  # id(value) -> position in ``compute`` of its last direct reader
    for position, instr in enumerate(compute):
        for value, role in instr.operands:
            if role is Role.IN:
                last_read[id(value)] = position
    chains: dict[int, set[int]] = {}  # id(producer) -> ids of the instructions of its chain
    index = 0
    while index < len(compute):
        producer = compute[index]
        index += 1
        if (
            producer.kind not in PRODUCERS
            or producer.dest.type.elem is not ElemKind.float32
            or producer.predicate is not None
        ):
            continue
        ops, dest = _grow_chain(plan, producer, compute, index, last_read, viewed)
        if ops:
            plan.epilogues[id(producer)] = ops
            plan.final_dest[id(producer)] = dest
            chains[id(producer)] = {id(consumer) for consumer in compute[index : index + len(ops)]}
            plan.skipped.update(chains[id(producer)])
            index += len(ops)
    _plan_tails(plan, compute, viewed, chains)
    return plan


def _plan_tails(
    plan: FusionPlan, compute: list[Instr], viewed: set[int], chains: dict[int, set[int]]
) -> None:
    """Tails (see the module docstring): an instruction ``expand_depthwise.fusable`` takes
    after the producer whose kernel comes right before its own, reading the end of that
    producer's chain, which nothing else reads (the chain's own instructions aside)."""
    emitted = [i for i in compute if id(i) not in plan.skipped]
    results = {id(plan.final_dest.get(id(i), i.dest)) for i in emitted}
    readers: dict[int, list[Instr]] = {}
    for instr in compute:
        for value, role in instr.operands:
            if role is not Role.OUT and id(value) in results:  # IN, or INOUT: it reads too
                readers.setdefault(id(value), []).append(instr)
    for producer, consumer in itertools.pairwise(emitted):
        result = plan.final_dest.get(id(producer), producer.dest)
        own = chains.get(id(producer), set())
        if (
            id(producer) in plan.skipped
            or not consumer.sources
            or consumer.sources[0] is not result
            or [r for r in readers.get(id(result), []) if id(r) not in own] != [consumer]
            or id(result) in viewed
            or not isinstance(result, AllocActivation)
        ):
            continue
        if expand_depthwise.fusable(producer, consumer, plan.epilogues.get(id(producer), []), _constant_root):
            plan.tails[id(producer)] = consumer
            plan.skipped.add(id(consumer))


def _grow_chain(
    plan: FusionPlan,
    producer: Instr,
    compute: list[Instr],
    start: int,
    last_read: dict[int, int],
    viewed: set[int],
) -> tuple[list[Op], Value]:
    """Consecutive element-wise instructions, from ``compute[start]`` on, that can be folded
    into ``producer``'s store. (Walked by position, not over a copy of the rest: a copy per
    producer made planning quadratic in the number of instructions.)"""
    ops: list[Op] = []
    carried = producer.dest
    shape = carried.type.shape
    written = {id(carried)}
    written_roots = {id(_root(carried))}
    for position in range(start, len(compute)):
        instr = compute[position]
        if not _is_f32_elementwise(instr) or instr.dest.type.shape != shape:
            break
        sources = instr.sources
        if not any(v is carried for v in sources):
            break
        # A buffer read through views later (a dense layer's result, then reshaped into
        # heads) may carry the chain only in place: the chain's value stays in it, where the
        # views read it; whether it dies here is not known from direct reads alone.
        if id(carried) in viewed and instr.dest is not carried:
            break
        # Another operand may be a view (a residual reshaped like the product, see
        # ``reshape_sinking``) of a buffer the chain does not write.
        others = [v for v in sources if v is not carried]
        if any(id(v) in written or id(_root(v)) in written_roots for v in others):
            break
        dies_here = last_read.get(id(carried), -1) <= position
        if instr.dest is not carried and not (isinstance(carried, AllocActivation) and dies_here):
            break
        operands = tuple(CHAIN if v is carried else plan.access(v, shape) for v in sources)
        ops.append(Op(op_kind(instr.kind, instr.attrs), instr.name, operands))
        carried = instr.dest
        written.add(id(carried))
        written_roots.add(id(_root(carried)))
    if producer.kind in GEMM_PRODUCERS and not _separate(producer, ops, carried):
        return [], producer.dest
    return ops, carried


def _root(value: Value) -> Value:
    return value.root


def _separate(producer: Instr, ops: list[Op], dest: Value) -> bool:
    """A GEMM producer writes whole results before (or while) the epilogue reads: the chain's
    destination must not be a buffer the producer or the epilogue reads."""
    read = [v for v in producer.sources] + [a.value for op in ops for a in op.operands if a.kind == "buffer"]
    return all(_root(v) is not _root(dest) for v in read if v is not None)
