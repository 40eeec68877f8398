"""Vector helpers the CPU kernels share: 16-lane float loads and stores (masked for tails),
splats, fused multiply-adds and prefetches, as llvmlite calls on ``<16 x float>``.

The GEMM generator (``gemm.py``), the direct and blocked convolutions, the element-wise
chains and the reductions all build on these; they lived in gemm.py, which made the GEMM
file the SIMD module too.
"""

from __future__ import annotations

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.loops import F32, I1, I32, PTR, i32, undefined_vector, vector_constant


def prefetch(k: Kernel, ptr: ir.Value, locality: int = 3) -> None:
    """A read prefetch of ``ptr``'s line (a hint: never faults); ``locality`` 3 brings it
    into every cache level, 2 into L2 and below (for data wanted only much later)."""
    fn = k.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    k.b.call(fn, [ptr, i32(0), i32(locality), i32(1)])


def lane_mask(lanes: int, width: int = VECTOR) -> ir.Constant | None:
    """The mask of the first ``lanes`` of a ``width``-lane vector, or None for a whole
    vector (no masking)."""
    if lanes >= width:
        return None
    return vector_constant(I1, tuple(int(i < lanes) for i in range(width)))


def splat(b: ir.IRBuilder, scalar: ir.Value, width: int = VECTOR) -> ir.Value:
    """``scalar`` (a float or an integer) in all ``width`` lanes (16 unless told)."""
    undefined = undefined_vector(scalar.type, width)
    vector = b.insert_element(undefined, scalar, i32(0))
    zeros = vector_constant(I32, None, width)  # every lane takes lane 0
    return b.shuffle_vector(vector, undefined, zeros)


def fma(k: Kernel, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    """``x * y + acc`` on float vectors of one width (16 lanes, or fewer), one rounding
    (llvm.fma)."""
    vector = x.type
    name = f"llvm.fma.v{vector.count}f32"
    return k.b.call(k.intrinsic(name, vector, [vector] * 3), [x, y, acc])


def masked_load(k: Kernel, ptr: ir.Value, mask: ir.Value | None, width: int = VECTOR) -> ir.Value:
    """``width`` floats (16 unless told) at ``ptr``; lanes outside ``mask`` (None: all in)
    read nothing and give 0."""
    vector = ir.VectorType(F32, width)
    if mask is None:
        return k.b.load(ptr, typ=vector, align=4)
    fn = k.intrinsic(f"llvm.masked.load.v{width}f32.p0", vector, [ptr.type, I32, mask.type, vector])
    return k.b.call(fn, [ptr, i32(4), mask, ir.Constant(vector, None)])


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
