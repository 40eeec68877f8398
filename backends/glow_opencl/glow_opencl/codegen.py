"""From an IRFunction with its memory plan to one OpenCL program and a list of launches.

Each compute instruction (or fused run, ``fusion.py``) becomes one or more ``Kernel``s from
the EMIT table; equal kernel texts are emitted once (their names are hashes of their text).
Every kernel parameter binds to a memory region and an element offset from the plan, so the
launch list is fixed at compile time and a run only enqueues it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from glow_core.errors import BackendError, UnsupportedOpError
from glow_core.ir.instructions import (
    AllocActivation,
    DeallocActivation,
    Instr,
    IRFunction,
    TensorView,
    Value,
    WeightKind,
    WeightVar,
)
from glow_core.ir.memory import MemoryPlan, align
from glow_core.spec import NODES, PRIMITIVES
from glow_core.types import ElemKind
from glow_opencl import gemm as _gemm  # noqa: F401 - registers MatMul, BatchMatMul, Convolution
from glow_opencl import indexing as _indexing  # noqa: F401 - registers TopK, ScatterElements
from glow_opencl import int8 as _int8  # noqa: F401 - registers QuantizedConv, QuantizedFullyConnected
from glow_opencl.emit import EMIT
from glow_opencl.fusion import Address, emit_run, inlinable, is_scalar, plan_runs, root_offset
from glow_opencl.runtime import Target
from glow_opencl.source import BYTE_KINDS, INDEX_LIMIT, DerivedConstant, Kernel, constant_value

CONSTANTS, PLACEHOLDERS, ACTIVATIONS = "constants", "placeholders", "activations"


def supported_kinds(target_kinds: frozenset[ElemKind]) -> dict[str, list[str]]:
    """Primitive (or kept high-level node) -> result element kinds this backend runs: EMIT x
    declared kinds x device kinds.

    A view primitive (Reshape) needs no kernel, but a stray Reshape instruction is a copy, so
    it has an EMIT entry like any other.
    """
    declared = {**NODES, **PRIMITIVES}
    return {
        kind: sorted(k.name for k in entry.kinds & declared[kind].kinds & target_kinds)
        for kind, entry in sorted(EMIT.items())
        if kind in declared
    }


@dataclass
class Launch:
    """One enqueue: a kernel name, (region, element offset) per parameter, NDRange sizes."""

    kernel: str
    args: list[tuple[str, int]]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    instrs: list[str] = field(default_factory=list)  # names of the instructions it runs
    predicate: tuple[str, int] | None = None
    """(region, byte offset) of the bool that must be true for the launch to run (None: always)."""


@dataclass
class Program:
    """The OpenCL C source of one compiled function, its launches in order, and the constants
    it derived (byte offset in the constants buffer -> data) past the plan's own."""

    source: str
    launches: list[Launch]
    constant_bytes: int
    derived: list[tuple[int, np.ndarray]] = field(default_factory=list)


def address_of(value: Value, plan: MemoryPlan, derived: dict[Value, int] | None = None) -> Address:
    """The region and byte range of ``value`` (views followed to their root)."""
    root, offset = root_offset(value)
    if derived is not None and root in derived:
        region, base = CONSTANTS, derived[root]
    elif isinstance(root, WeightVar):
        if root.kind is WeightKind.CONSTANT:
            region, base = CONSTANTS, plan.constant_offsets[root.name]
        else:
            region, base = PLACEHOLDERS, plan.placeholder_offsets[root.name]
    elif isinstance(root, AllocActivation):
        region, base = ACTIVATIONS, plan.offset_of(root.name)
    else:
        raise BackendError(f"opencl: operand {value.name!r} has no address in the memory plan")
    return Address(region, base + offset, value.type.nbytes)


def _check_supported(instr: Instr, target: Target) -> None:
    """Refuse what no emitter handles; operand kinds too (the core checks result kinds only,
    and a Convert from bfloat16 has a float32 result)."""
    entry = EMIT.get(instr.kind)
    elem = instr.dest.type.elem
    host = entry.host_operands if entry else frozenset()
    operands = {
        v.type.elem for n, v in enumerate(instr.sources) if n not in host or constant_value(v) is None
    }
    selecting = elem
    if instr.spec is not None:
        selecting = instr.spec.selecting_kind(instr.dest.type, [v.type for v in instr.sources])
    # One-byte storage kinds (float8, int4...) only where the entry moves them as bytes.
    moved_only = {elem, *operands} & BYTE_KINDS
    if (
        entry is None
        or selecting not in entry.kinds
        or not {elem, *operands} <= target.kinds
        or not moved_only <= entry.kinds
    ):
        refused = ({elem, *operands} - target.kinds) | (moved_only - (entry.kinds if entry else set()))
        kinds = ", ".join(sorted(k.name for k in refused)) or elem.name
        lacking = [
            f" (the device lacks {extension})"
            for kind, extension, present in (
                (ElemKind.float16, "cl_khr_fp16", target.fp16),
                (ElemKind.float64, "cl_khr_fp64", target.fp64),
            )
            if kind in {elem, *operands} and not present
        ]
        raise UnsupportedOpError(
            f"opencl on {target.name!r} cannot run {instr.kind} {instr.name!r} on {kinds}" + "".join(lacking)
        )


def generate(ir: IRFunction, target: Target, fuse: bool = True) -> Program:
    """The program for ``ir`` on ``target``: kernels deduplicated, launches in IR order."""
    plan: MemoryPlan = ir.memory_plan
    if plan is None:
        raise BackendError(f"IR function {ir.name!r} has no memory plan")
    for size in (plan.constant_bytes, plan.placeholder_bytes, plan.arena_bytes):
        if size > INDEX_LIMIT:
            raise BackendError(f"opencl: a memory region of {size} bytes exceeds 32-bit indexing")
    skip = (AllocActivation, DeallocActivation, TensorView)
    compute = [i for i in ir.instrs if not isinstance(i, skip)]
    for instr in compute:
        _check_supported(instr, target)
    inline = inlinable(compute) if fuse else {}
    compute = [i for i in compute if i.dest not in inline or inline[i.dest] is not i]
    texts: dict[str, str] = {}
    launches: list[Launch] = []
    derived: dict[Value, int] = {}  # constants the emitters derived -> byte offset
    cursor = align(plan.constant_bytes)
    for run in plan_runs(compute, lambda v: address_of(v, plan), inline, fuse):
        if is_scalar(run[0]):
            kernels = [emit_run(run, inline)]
        else:
            entry = EMIT[run[0].kind]
            assert entry.kernel is not None and len(run) == 1
            kernels = entry.kernel(run[0], target)
        for kernel in kernels:
            if 0 in kernel.global_size:
                continue  # an empty tensor: nothing to compute
            texts.setdefault(kernel.name, kernel.text())
            for value in kernel.values:
                if isinstance(value, DerivedConstant) and value not in derived:
                    derived[value] = cursor
                    cursor = align(cursor + value.type.nbytes)
            launch = _launch(kernel, lambda v: address_of(v, plan, derived), [i.name for i in run])
            if run[0].predicate is not None:  # a predicated instruction is a run of its own
                flag = address_of(run[0].predicate, plan)
                launch.predicate = (flag.region, flag.offset)
            launches.append(launch)
    # OpenCL C may contract a * b + c into one fma unless told not to, and GPU compilers do:
    # a dequantization followed by an add then rounds once where the reference rounds twice,
    # and a value on a quantization step's edge lands on the other side. Kernels that want
    # fused multiply-adds (the GEMM and convolution tiles) call fma() explicitly.
    header = "// generated by glow-opencl: one kernel per distinct instruction shape\n"
    header += "#pragma OPENCL FP_CONTRACT OFF\n"
    if target.fp64 and any(v.type.elem is ElemKind.float64 for i in compute for v, _ in i.operands):
        header += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    placed = [(offset, value.value) for value, offset in derived.items()]
    return Program(header + "\n".join(texts.values()), launches, cursor, placed)


def _launch(kernel: Kernel, addr: Callable[[Value], Address], names: list[str]) -> Launch:
    args = []
    for param, value in zip(kernel.params, kernel.values, strict=True):
        address = addr(value)
        itemsize = param.elem.itemsize  # half moved raw as ushort is 2 bytes too
        if address.offset % itemsize:
            raise BackendError(
                f"opencl: {value.name!r} at byte {address.offset} is not aligned "
                f"to its {itemsize}-byte elements"
            )
        args.append((address.region, address.offset // itemsize))
    return Launch(kernel.name, args, kernel.global_size, kernel.local_size, names)
