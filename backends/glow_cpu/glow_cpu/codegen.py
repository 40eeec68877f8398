"""One program per IR function, with ONE native entry point.

``void glow_entry(i8* constants, i8* placeholders, i8* activations)`` runs the whole
function: one ctypes call per inference. Every instruction is one kernel (one or more phase
functions, see ``emit.Kernel``) called from ``glow_body(constants, placeholders,
activations, tid)`` with operand addresses that are constants of the memory plan.

Instructions that do the same work on different buffers share one kernel: its code depends
only on what ``kernel_key`` lists (kind, attributes, operand types, aliasing, fusion)
and on the program's thread settings (threads, parts per thread) and register file, so it
is generated once per distinct key and every such instruction calls it with its own
pointers (and its own block of packed constants). ResNet-50's repeated bottlenecks and the
unrolled steps of a recurrence make LLVM compile each distinct kernel once, so compile time
grows with distinct work rather than with the number of instructions.

Each distinct kernel is an LLVM module of its own, and the body and entry point one more
(which declares the kernels' phase functions it calls), so LLVM compiles the modules
independently, on several threads (``jit.compile_objects``), and MCJIT links their objects.
Nothing is lost by the cut: the phase functions are ``noinline`` anyway, and a module's code
depends only on its own text, so the objects are the same however many threads built them.

The constant region is laid out once every kernel is emitted (``_place_constants``): each
instruction's block of packed copies first, then only the constants whose own bytes some
kernel reads (a kernel's unread pointer arguments are found once, in its emitted code). A
GEMM or convolution weight read only through its packed panels is not stored a second time:
each weight byte is in the region (and in a bundle's weights file) once.

A predicated instruction's kernel is called only when its one-byte bool predicate is
non-zero; every thread reads the same byte (once the previous phase is done, so a predicate
computed by the previous kernel is visible) and so all take the same branch.

With ``threads > 1`` the calling thread and ``threads - 1`` worker threads each run the same
body (SPMD, as an OpenMP parallel region would): a parallel phase is cut into ``threads``
times ``parts_per_thread`` parts that the threads claim (a thread done early takes another
part rather than idling while the last one runs), a serial phase runs on thread 0, and before each phase a
thread waits (spinning, then yielding the CPU, since the machine may be shared) until the
previous phase's parts are done (``claims.py``). The workers start on the first call and
wait between calls (``workers.py``); the entry returns when all of them have finished the body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from glow_core.errors import UnsupportedOpError
from glow_core.ir.fingerprint import encode
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
from glow_core.ir.memory import MemoryPlan, align
from glow_core.types import Type
from glow_cpu.body import emit_body, emit_entry
from glow_cpu.chain_ops import Access
from glow_cpu.emit import (
    EMIT,
    Fused,
    Kernel,
    KernelPack,
    Layout,
    Packed,
    Phase,
    Tail,
    mark_function,
)
from glow_cpu.fusion import ELEMENTWISE, FusionPlan, plan_fusion
from glow_cpu.registers import AVX512, RegisterFile

PROGRAM_PARALLEL_WORK = 1 << 18
"""Below this much parallel work in a whole function (about 60 us on one core) it runs on one
thread whatever ``threads`` says: waking the waiting workers and the waits between its
kernels would cost more than they share (measured: docs/performance.md)."""


@dataclass
class KernelCode:
    """A generated kernel, shared by every instruction with the same ``kernel_key``."""

    phases: list[Phase]
    kind: str  # the instruction kind, then the kinds fused after it: "Convolution+Add+Max"
    work: int  # the kernel's estimate (about one 16-lane FMA or one element per unit)
    packs: list[KernelPack]  # the constants it reads re-laid out, in its packed block
    packed_bytes: int  # the size of that block (each instruction gets its own)
    unread: frozenset[int] = frozenset()  # pointer arguments its code never uses


@dataclass
class Step:
    """One instruction: the kernel it calls and where its operands live."""

    name: str
    kernel: KernelCode
    addresses: list[tuple[int, int]]  # (region, byte offset) per operand, dest first
    packed_offset: int = 0  # byte offset of its packed constants in the constant region
    predicate: tuple[int, int] | None = None  # (region, byte offset) of the bool that gates it
    # (operand position, -1 for the predicate; constant weight; byte offset inside it; whether
    # the kernel reads that pointer) per constant operand, placed by ``_place_constants``
    constants: list[tuple[int, str, int, bool]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.kernel.kind

    @property
    def work(self) -> int:
        return self.kernel.work

    @property
    def phases(self) -> list[Phase]:
        return self.kernel.phases


@dataclass
class Program:
    """The modules' text and what the runtime needs besides the object code."""

    modules: list[tuple[str, str]]  # (what it holds, LLVM IR text): each kernel's, then the body's
    layout: Layout
    steps: list[tuple[str, str]] = field(default_factory=list)  # (name, kind) per instruction
    kernels: int = 0  # distinct kernels generated for those steps

    @property
    def llvm_ir(self) -> str:
        """All modules linked into one text (tests and tools that read the whole program)."""
        context = llvm.create_context()
        linked = llvm.parse_assembly(self.modules[-1][1], context=context)
        for _, text in self.modules[:-1]:
            linked.link_in(llvm.parse_assembly(text, context=context))
        return str(linked)


def address_of(value: Value, plan: MemoryPlan) -> tuple[int, int]:
    """(region, byte offset): 0 constants, 1 placeholders, 2 activations."""
    if isinstance(value, TensorView):
        region, offset = address_of(value.source, plan)
        return region, offset + value.offset * value.source.type.elem.itemsize
    if isinstance(value, WeightVar):
        if value.kind is WeightKind.CONSTANT:
            return 0, plan.constant_offsets[value.name]
        return 1, plan.placeholder_offsets[value.name]
    if isinstance(value, AllocActivation):
        return 2, plan.offset_of(value.name)
    raise TypeError(f"cannot place operand {value!r}")


def constant_root(value: Value) -> tuple[WeightVar, int] | None:
    """The constant weight ``value`` is (or is a view of) and its byte offset inside it."""
    root, byte_offset = value, 0
    while isinstance(root, TensorView):
        byte_offset += root.offset * root.source.type.elem.itemsize
        root = root.source
    if isinstance(root, WeightVar) and root.kind is WeightKind.CONSTANT:
        return root, byte_offset
    return None


def constant_value(value: Value) -> np.ndarray | None:
    """The compile-time value of an operand that is a constant (or a view of one)."""
    found = constant_root(value)
    if found is None or found[0].value is None:
        return None
    root, byte_offset = found
    raw = np.ascontiguousarray(root.value, dtype=root.type.dtype).reshape(-1).view(np.uint8)
    window = raw[byte_offset : byte_offset + value.type.nbytes]
    return window.view(value.type.dtype).reshape(value.type.shape)


def _known_constant(value: Value) -> bool:
    """Whether ``constant_value(value)`` is an array (without making it): the fact a kernel's
    key records about each operand, asked once per instruction."""
    found = constant_root(value)
    return found is not None and found[0].value is not None


def _check_emitter(instr: Instr) -> None:
    """Refuse an instruction no emitter handles, naming its kind and selecting element kind."""
    emitter = EMIT.get(instr.kind)
    dest = instr.dest.type
    elem = instr.spec.selecting_kind(dest, [v.type for v in instr.sources]) if instr.spec else None
    elem = elem or dest.elem
    if emitter is None or not emitter.handles(elem):
        raise UnsupportedOpError(
            f"backend 'cpu' has no kernel for {instr.kind}[{elem.name}] ({instr.name!r}); "
            "pick another backend (`glow backends`)"
        )


def _noalias(spans: list[tuple[int, int, int]]) -> list[bool]:
    """Whether each pointer argument's bytes (region, first byte, end byte) are disjoint from
    the destination's (the first)."""
    dest = spans[0]

    def disjoint(span: tuple[int, int, int]) -> bool:
        return span[0] != dest[0] or span[2] <= dest[1] or dest[2] <= span[1]

    sources_ok = [disjoint(s) for s in spans[1:]]
    return [all(sources_ok), *sources_ok]


def _arguments(instr: Instr, fusion: FusionPlan) -> tuple[list[Value], Fused]:
    """The values whose addresses a kernel receives, and how its element-wise parts read them.

    Argument 0 is where the result goes (the end of a fused chain, or of the tail's chain
    when the kernel computes a tail), then the sources (a virtual one replaced by what it is
    computed from), then buffers the epilogue reads, then the tail's other sources and the
    buffers its epilogue reads.
    """
    shape = instr.dest.type.shape
    elementwise = instr.kind in ELEMENTWISE
    accesses = [
        fusion.access(v, shape) if elementwise else fusion.access(v, v.type.shape) for v in instr.sources
    ]
    tail_instr = fusion.tails.get(id(instr))
    last = instr if tail_instr is None else tail_instr
    args = [fusion.final_dest.get(id(last), last.dest)]
    args += [a.value if a.kind == "buffer" else v for v, a in zip(instr.sources, accesses, strict=True)]
    epilogue = fusion.epilogues.get(id(instr), [])
    for op in epilogue:
        args += [a.value for a in op.operands if a.kind == "buffer" and all(a.value is not v for v in args)]
    tail = None
    if tail_instr is not None:
        tail = Tail(tail_instr, fusion.epilogues.get(id(tail_instr), []))
        args += [v for v in tail_instr.sources[1:] if all(v is not a for a in args)]
        for op in tail.epilogue:
            args += [
                a.value for a in op.operands if a.kind == "buffer" and all(a.value is not v for v in args)
            ]
    bind: dict[int, int] = {}
    for position, value in enumerate(args):
        bind.setdefault(id(value), position)
    return args, Fused(accesses, epilogue, bind, tail)


def _keep_disjoint_tails(ir_fn: IRFunction, fusion: FusionPlan, spans: _Spans) -> None:
    """Drop each tail whose result's bytes overlap a buffer its kernel reads: the memory plan
    was made for the instructions apart, so the tail's destination may reuse the bytes of
    its producer's input, dead once the producer has run, which the fused kernel still reads
    while it stores."""
    for instr in ir_fn.instrs:
        if id(instr) not in fusion.tails:
            continue
        args, _ = _arguments(instr, fusion)
        if not all(_noalias([spans.span(v) for v in args])[1:]):
            fusion.skipped.discard(id(fusion.tails.pop(id(instr))))


def build_program(
    ir_fn: IRFunction,
    threads: int,
    profile: bool,
    parallel_work: int = PROGRAM_PARALLEL_WORK,
    registers: RegisterFile = AVX512,
    check_sharing: bool = False,
    parts_per_thread: int = 1,
    submit: Callable[[str, str], None] | None = None,
) -> Program:
    """Emit every distinct kernel once, then the body and the entry point; register tiles
    sized for ``registers``, the vector register file of the target the code is for, and
    every parallel phase cut into ``threads * parts_per_thread`` parts.

    ``check_sharing`` (tests) also emits every instruction that reuses a kernel on its own
    and raises ``SharingError`` unless its code is the shared kernel's, character for
    character: the proof that ``kernel_key`` names everything the emitters read.

    ``submit(name, text)``, if given, receives each kernel's module as soon as it is complete
    (``jit.ModuleCompiler.submit``: LLVM compiles it while the next kernels are emitted); the
    returned ``Program.modules`` are what the program consists of.
    """
    prepared = _prepare_all(ir_fn)
    return _build(
        ir_fn, prepared, threads, profile, parallel_work, registers, check_sharing, parts_per_thread, submit
    )


def _build(
    ir_fn: IRFunction,
    prepared: list[_Prepared],
    threads: int,
    profile: bool,
    parallel_work: int,
    registers: RegisterFile,
    check_sharing: bool,
    parts_per_thread: int,
    submit: Callable[[str, str], None] | None,
) -> Program:
    """``build_program`` for instructions already prepared (``_prepare_all``)."""
    plan: MemoryPlan = ir_fn.memory_plan
    module = ir.Module(name=f"glow.{ir_fn.name}")  # the body and entry point
    layout = Layout()
    settings = (threads, parts_per_thread, parallel_work)
    emitted = _Kernels(module, layout, settings, registers, check_sharing, submit)
    steps = [_step(emitted, p, layout) for p in prepared]
    scratch_base = align(plan.arena_bytes)
    shared = sum(s.work for s in steps if any(p.parallel for p in s.phases))
    if threads > 1 and shared < parallel_work:
        # Too little to share: waking the workers (and, on a busy machine, waiting for a CPU
        # to run them) costs more than the work. Emit the single-threaded program instead,
        # from the same prepared instructions: the fusion plan, arguments and kernel keys do
        # not depend on the threads (for gru_text they were 3 of the 5 s emission took when
        # this pass redid them).
        return _build(
            ir_fn, prepared, 1, profile, parallel_work, registers, check_sharing, parts_per_thread, submit
        )
    _place_constants(ir_fn, steps, layout)
    emit_body(module, steps, threads, threads * parts_per_thread, profile, scratch_base, layout)
    emit_entry(module, threads)
    modules = list(emitted.modules)
    modules.append((f"the body of {ir_fn.name!r}", str(module)))
    return Program(modules, layout, [(s.name, s.kind) for s in steps], len(emitted.codes))


def _declare(module: ir.Module, fn: ir.Function) -> ir.Function:
    """A declaration in ``module`` (the body's) of phase function ``fn`` of a kernel module."""
    declared = ir.Function(module, fn.ftype, fn.name)
    mark_function(declared)
    return declared


def _unread_arguments(phases: list[Phase], count: int) -> frozenset[int]:
    """Which of the first ``count`` pointer arguments no phase's code uses (a constant the
    kernel reads only packed): read from the emitted instructions, so never a guess."""
    used: set[int] = set()
    for phase in phases:
        position = {id(arg): i for i, arg in enumerate(phase.fn.args[:count])}
        # One set of every operand's id per function, then one lookup per argument: the
        # kernels have about 30k instructions in all, and this walk runs on the emitting
        # thread (the compile's critical path).
        operands = {
            id(v) for block in phase.fn.blocks for instr in block.instructions for v in instr.operands
        }
        operands.update(
            id(v)
            for block in phase.fn.blocks
            for instr in block.instructions
            if hasattr(instr, "incomings")
            for v, _ in instr.incomings
        )
        used.update(i for key, i in position.items() if key in operands)
    return frozenset(range(count)) - used


class SharingError(AssertionError):
    """An instruction's own code differs from the kernel it was given (a glow bug:
    ``kernel_key`` misses something an emitter reads)."""


@dataclass
class _Kernels:
    """The kernels emitted so far into ``module``, by key."""

    module: ir.Module
    layout: Layout
    # (threads, parts per thread, parallel work below which a kernel runs on one thread): the
    # same for every kernel of a program, so not in ``kernel_key`` either.
    threads: tuple[int, int, int]
    # The program's register file: every kernel of it is tiled for this one, so it is not in
    # ``kernel_key`` (a kernel is shared within its program only).
    registers: RegisterFile
    check_sharing: bool
    submit: Callable[[str, str], None] | None = None  # gets each kernel's module when complete
    codes: dict[tuple, KernelCode] = field(default_factory=dict)
    modules: list[tuple[str, str]] = field(default_factory=list)  # (name, text) per kernel
    texts: dict[tuple, str] = field(default_factory=dict)  # key -> code alone (check_sharing)


def kernel_key(
    instr: Instr, constants: Sequence[bool], args: list[Value], noalias: list[bool], fused: Fused
) -> tuple:
    """Everything a kernel's code depends on, so equal keys mean identical code.

    The instruction's kind and exact attributes, its operand types and roles, which operands
    are constants with a known value (``constants``, one flag per operand: the emitters ask
    only that; packed weights come through a pointer), which
    pointers may alias the destination, and the fusion: how each element-wise source is read
    and the epilogue, each buffer named by its pointer argument and type. Names and
    addresses are not in it: they are the pointers the body passes. Floats are keyed by
    their bits (``float.hex``: 0.0 and -0.0 differ), attributes exactly (``encode``).
    """

    def access(a: Access) -> tuple:
        where = None if a.value is None else (fused.bind.get(id(a.value)), _type_key(a.value.type))
        return (a.kind, where, a.strides, a.constant.hex())

    return (
        instr.kind,
        _attrs_key(instr.attrs),
        tuple((_type_key(v.type), role) for v, role in instr.operands),
        tuple(constants),
        tuple(_type_key(a.type) for a in args),
        tuple(noalias),
        tuple(access(a) for a in fused.accesses),
        tuple((op.kind, tuple(access(a) for a in op.operands)) for op in fused.epilogue),
        None if fused.tail is None else _tail_key(fused.tail, access),
    )


def _tail_key(tail: Tail, access: Callable[[Access], tuple]) -> tuple:
    """What a kernel's code reads of the instruction it computes after its own: kind,
    attributes, operand types and its epilogue (buffers named by their pointer argument)."""
    instr = tail.instr
    return (
        instr.kind,
        _attrs_key(instr.attrs),
        tuple((_type_key(v.type), role) for v, role in instr.operands),
        tuple((op.kind, tuple(access(a) for a in op.operands)) for op in tail.epilogue),
    )


def _type_key(t: Type) -> tuple:
    # The element kind by its name: an enum member hashes through a Python-level
    # ``__hash__``, and the key is hashed once per instruction.
    scale = None if t.scale is None else float(t.scale).hex()
    return (t.shape, t.elem.name, scale, t.offset)


def _attrs_key(attrs: dict) -> str:
    """Attributes exactly; the common small ones (ints, strings, int tuples) without ``encode``."""
    if all(_plain(v) for v in attrs.values()):
        return repr(sorted((k, type(v).__name__, v) for k, v in attrs.items()))
    return json.dumps(encode(attrs), separators=(",", ":"))


def _plain(value: object) -> bool:
    """An int, str, bool or None, or a tuple of ints: its ``repr`` says exactly what it is
    (a Slice's absent ``steps`` is None, so unrolled recurrences stay on this path)."""
    return type(value) in _PLAIN or (type(value) is tuple and all(type(x) is int for x in value))


_PLAIN = (int, str, bool, type(None))


def _called_from_the_body(phases: list) -> None:
    """Each phase's function gets external linkage: the body's module calls it. (A function of
    its own, so no loop variable outlives it holding the last phase and, through it, the
    kernel's whole module.)"""
    for phase in phases:
        phase.fn.linkage = ""


@dataclass(frozen=True)
class _Prepared:
    """What an instruction's step needs that the program's threads and register file do not
    change: computed once per instruction even when the program is emitted twice."""

    index: int
    instr: Instr
    bare: Instr  # the instruction without its predicate operand: what its kernel sees
    args: list[Value]
    fused: Fused
    addresses: list[tuple[int, int]]
    predicate: tuple[int, int] | None
    noalias: list[bool]
    key: tuple


class _Spans(dict[int, tuple[int, int, int]]):
    """id(value) -> (region, first byte, end byte) in one memory plan: found once per value,
    not once per instruction passing it (a buffer is written once and read a few times).
    The values outlive the program's preparation, so their ids stay theirs."""

    def __init__(self, plan: MemoryPlan):
        super().__init__()
        self.plan = plan

    def span(self, value: Value) -> tuple[int, int, int]:
        found = self.get(id(value))
        if found is None:
            region, offset = address_of(value, self.plan)
            found = self[id(value)] = (region, offset, offset + value.type.nbytes)
        return found


def _prepare_all(ir_fn: IRFunction) -> list[_Prepared]:
    """Every instruction that gets a step (allocations and instructions fused into another's
    kernel get none), prepared in program order."""
    spans = _Spans(ir_fn.memory_plan)
    fusion = plan_fusion(ir_fn)
    _keep_disjoint_tails(ir_fn, fusion, spans)
    return [
        _prepare(instr, index, spans, fusion)
        for index, instr in enumerate(ir_fn.instrs)
        if instr.kind not in MEMORY_KINDS and id(instr) not in fusion.skipped
    ]


def _prepare(instr: Instr, index: int, spans: _Spans, fusion: FusionPlan) -> _Prepared:
    """``instr``'s kernel arguments, their addresses and its kernel key; refused when no
    kernel handles its kind."""
    _check_emitter(instr)
    args, fused = _arguments(instr, fusion)
    arg_spans = [spans.span(v) for v in args]
    addresses = [(region, offset) for region, offset, _ in arg_spans]
    gate = instr.predicate
    predicate = None if gate is None else spans.span(gate)[:2]
    # Kernels see the computing operands only; the predicate is the body's business. The
    # copy without it is made only for an instruction that has one.
    bare = (
        instr
        if gate is None
        else replace(instr, operands=[(v, r) for v, r in instr.operands if r is not Role.PRED])
    )
    noalias = _noalias(arg_spans)
    try:
        key = kernel_key(bare, [_known_constant(v) for v, _ in bare.operands], args, noalias, fused)
    except TypeError:  # an attribute fingerprint cannot write exactly: this one shares nothing
        key = ("unshared", index)
    return _Prepared(index, instr, bare, args, fused, addresses, predicate, noalias, key)


def _step(emitted: _Kernels, prepared: _Prepared, layout: Layout) -> Step:
    """The step of a prepared instruction: its kernel (emitted unless one with its key
    exists), its operands' addresses and its own block of packed constants."""
    index, instr, key = prepared.index, prepared.instr, prepared.key
    bare, args, fused, noalias = prepared.bare, prepared.args, prepared.fused, prepared.noalias
    gate = instr.predicate
    code = emitted.codes.get(key)
    values: list[np.ndarray | None] = []
    if code is None or emitted.check_sharing:
        # The constants' values (array views) only for the emitters: the key needs only
        # which operands have one, and most instructions reuse a kernel.
        values = [constant_value(v) for v, _ in bare.operands]
    if code is None:
        name = f"k{index}"
        module = ir.Module(name=f"{emitted.module.name}.{name}")
        kernel = _kernel(emitted, module, bare, name, values, noalias, layout, fused)
        phases = kernel.finish()
        _called_from_the_body(phases)
        kind = _kind_label(instr, fused)
        unread = _unread_arguments(phases, len(args))
        text = str(module)
        # The body calls the phases through declarations in its own module, made now: the
        # kernel's module (its instructions are thousands of objects in reference cycles)
        # is then garbage once its text exists, and whoever ``submit`` is may collect it
        # before the next kernel is emitted (docs/performance.md, "Footprint, round four").
        declared = [replace(p, fn=_declare(emitted.module, p.fn)) for p in phases]
        code = KernelCode(declared, kind, kernel.work, kernel.packs, kernel.packed_bytes, unread)
        del kernel, module, phases
        emitted.codes[key] = code
        emitted.modules.append((f"kernel {name} ({kind})", text))
        if emitted.submit is not None:
            emitted.submit(*emitted.modules[-1])
    if emitted.check_sharing:
        _check_sharing(emitted, key, bare, values, noalias, fused)
    constants = [
        (position, found[0].name, found[1], position not in code.unread)
        for position, value in enumerate(args)
        if (found := constant_root(value)) is not None
    ]
    if gate is not None and (found := constant_root(gate)) is not None:
        constants.append((-1, found[0].name, found[1], True))
    # The packed copies come first in the region, one block per instruction (constants that
    # are read as they are follow them, placed by ``_place_constants``).
    packed_offset = layout.constant_bytes
    for p in code.packs:
        layout.packed.append(Packed(packed_offset + p.offset, p.packer, index, p.operand, p.params))
    layout.constant_bytes += code.packed_bytes
    name = instr.name if fused.tail is None else f"{instr.name}+{fused.tail.instr.name}"
    return Step(name, code, prepared.addresses, packed_offset, prepared.predicate, constants)


def _kind_label(instr: Instr, fused: Fused) -> str:
    """What a kernel computes, for profiles: ``Convolution+Add+Max``; a tail and its chain
    follow (``Convolution+Add+Max+Min+Convolution+Add+Max+Min``)."""
    kinds = [instr.kind, *(op.kind for op in fused.epilogue)]
    if fused.tail is not None:
        kinds += [fused.tail.instr.kind, *(op.kind for op in fused.tail.epilogue)]
    return "+".join(kinds)


def _kernel(
    emitted: _Kernels,
    module: ir.Module,
    instr: Instr,
    name: str,
    values: list[np.ndarray | None],
    noalias: list[bool],
    layout: Layout,
    fused: Fused,
) -> Kernel:
    """``instr``'s kernel emitted into ``module`` as functions ``NAME.p0``, ``NAME.p1``...,
    with the thread settings and register file of the program ``emitted`` is building."""
    count, parts_per_thread, parallel_work = emitted.threads
    accumulators = emitted.registers.accumulators
    kernel = Kernel(
        module, instr, name, values, noalias, count, layout, fused, accumulators, parts_per_thread
    )
    kernel.min_work = min(kernel.min_work, parallel_work)
    EMIT[instr.kind].fn(kernel)
    return kernel


def _check_sharing(
    emitted: _Kernels, key: tuple, instr: Instr, values: list, noalias: list[bool], fused: Fused
) -> None:
    """Emit ``instr`` alone (in a module of its own, under a fixed name) and compare."""
    alone = ir.Module(name="alone")
    kernel = _kernel(emitted, alone, instr, "k", values, noalias, Layout(), fused)
    kernel.finish()
    text = f"{alone!s}\n{kernel.packs}\n{kernel.work}\n{kernel.packed_bytes}"
    first = emitted.texts.setdefault(key, text)
    if text != first:
        raise SharingError(f"{instr.name!r} ({instr.kind}) shares a kernel whose code differs from its own")


def _place_constants(ir_fn: IRFunction, steps: list[Step], layout: Layout) -> None:
    """Lay out the constant region (see the module) and point every step's constant operands
    into it. An operand whose pointer its kernel never reads gets the region's start."""
    read = {name for step in steps for _, name, _, reads in step.constants if reads}
    layout.constant_base = cursor = align(layout.constant_bytes)
    plan = ir_fn.memory_plan
    constants = [w for w in ir_fn.weights if w.kind is WeightKind.CONSTANT and w.name in read]
    for w in sorted(constants, key=lambda w: plan.constant_offsets[w.name]):
        layout.constant_offsets[w.name] = cursor
        cursor += align(w.type.nbytes)
    layout.region_bytes = cursor
    for step in steps:
        for position, name, inner, reads in step.constants:
            address = (0, layout.constant_offsets[name] + inner) if reads else (0, 0)
            if position < 0:
                step.predicate = address
            else:
                step.addresses[position] = address
