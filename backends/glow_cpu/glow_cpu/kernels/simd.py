"""Vector helpers the CPU kernels share: 16-lane float loads and stores (masked for tails),
splats, fused multiply-adds and prefetches, as llvmlite calls on ``<16 x float>``.

The GEMM generator (``gemm.py``), the direct and blocked convolutions, the element-wise
chains and the reductions all build on these; they lived in gemm.py, which made the GEMM
file the SIMD module too.
"""

from __future__ import annotations

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.loops import I1, I32, PTR, i32, undefined_vector, vector_constant


def prefetch(k: Kernel, ptr: ir.Value, locality: int = 3) -> None:
    """A read prefetch of ``ptr``'s line (a hint: never faults); ``locality`` 3 brings it
    into every cache level, 2 into L2 and below (for data wanted only much later)."""
    fn = k.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    k.b.call(fn, [ptr, i32(0), i32(locality), i32(1)])


def lane_mask(lanes: int) -> ir.Constant | None:
    """The mask of the first ``lanes`` of a vector, or None for a whole vector (no masking)."""
    if lanes >= VECTOR:
        return None
    return vector_constant(I1, tuple(int(i < lanes) for i in range(VECTOR)))


def splat(b: ir.IRBuilder, scalar: ir.Value) -> ir.Value:
    """``scalar`` (a float or an integer) in all 16 lanes."""
    undefined = undefined_vector(scalar.type, VECTOR)
    vector = b.insert_element(undefined, scalar, i32(0))
    zeros = vector_constant(I32, None, VECTOR)  # every lane takes lane 0
    return b.shuffle_vector(vector, undefined, zeros)


def fma(k: Kernel, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    """``x * y + acc`` on ``<16 x float>`` vectors, one rounding (llvm.fma)."""
    return k.b.call(k.intrinsic("llvm.fma.v16f32", F32X16, [F32X16] * 3), [x, y, acc])


def masked_load(k: Kernel, ptr: ir.Value, mask: ir.Value | None) -> ir.Value:
    """16 floats at ``ptr``; lanes outside ``mask`` (None: all in) read nothing and give 0."""
    if mask is None:
        return k.b.load(ptr, typ=F32X16, align=4)
    fn = k.intrinsic("llvm.masked.load.v16f32.p0", F32X16, [ptr.type, I32, mask.type, F32X16])
    return k.b.call(fn, [ptr, i32(4), mask, ir.Constant(F32X16, None)])


def masked_store(k: Kernel, ptr: ir.Value, value: ir.Value, mask: ir.Value | None) -> ir.Instruction:
    """``value`` to ``ptr``, writing only the lanes in ``mask`` (None: all of them); returns
    the store (to attach metadata to)."""
    if mask is None:
        return k.b.store(value, ptr, align=4)
    fn = k.intrinsic("llvm.masked.store.v16f32.p0", ir.VoidType(), [F32X16, ptr.type, I32, mask.type])
    return k.b.call(fn, [value, ptr, i32(4), mask])


def vector_load(k: Kernel, ptr: ir.Value, lanes: int = VECTOR) -> ir.Value:
    """``lanes`` floats at ``ptr`` as a ``<16 x float>`` (masked when fewer than 16)."""
    return masked_load(k, ptr, lane_mask(lanes))


def vector_store(k: Kernel, ptr: ir.Value, value: ir.Value, lanes: int = VECTOR) -> ir.Instruction:
    """The first ``lanes`` floats of ``value`` to ``ptr`` (masked when fewer than 16)."""
    return masked_store(k, ptr, value, lane_mask(lanes))
