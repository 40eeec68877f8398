"""QuantizedAdd: the residual sum of two int8/uint8 tensors, requantized, in one pass.

The reference (``glow_core.graph.nodes.quantized.QuantizedAdd``) is, per element and in
float64, ``clip(round_half_even((a - oa) * ma + (b - ob) * mb) + o, low, high)``. The kernel
does the same operations in the same order, ``LANES`` elements at a time: the centered
integers are exact in int32 and in float64, the two products and their sum round once each
as the reference's do (no fused multiply-add: the IR carries no ``contract`` flag),
the rounding, offset and clamp are ``int8_conv.round_to_output`` (round half to even,
exactly, by one float64 addition), shared with the convolutions. So the result is bit-equal
to the interpreter's, and the element-wise float32 chain a QDQ model spells this with
(dequantize twice, add, relu, quantize: some twenty operations per element, four tensors of
float32 traffic) becomes one read of each operand and one byte written.
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.graph.nodes.quantized import QUANTIZED_KINDS
from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, emits
from glow_cpu.kernels import int8_conv
from glow_cpu.loops import F64, I8, I32, for_range, i64

LANES = 8
"""Elements per vector step (one ymm of float64 pairs per operand after widening on AVX2)."""


def _centered(b: ir.IRBuilder, raw: ir.Value, kind: ElemKind, offset: int, ty: ir.Type) -> ir.Value:
    """``float64(q - offset)`` of int8/uint8 ``raw`` (exact: |q - offset| <= 255)."""
    wide = ir.VectorType(I32, ty.count) if isinstance(ty, ir.VectorType) else I32
    value = b.zext(raw, wide) if kind is ElemKind.uint8 else b.sext(raw, wide)
    if offset:
        value = b.sub(value, _const(wide, offset))
    return b.sitofp(value, ty)


def _const(ty: ir.Type, value: float | int) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _sum(k: Kernel, a: ir.Value, c: ir.Value, lanes: int) -> ir.Value:
    """``lanes`` results (a vector, or a scalar for 1) from raw operand values ``a``, ``c``."""
    b, attrs = k.b, k.attrs
    wide = ir.VectorType(F64, lanes) if lanes > 1 else F64
    lhs = _centered(b, a, k.types[1].elem, attrs["lhs_offset"], wide)
    rhs = _centered(b, c, k.types[2].elem, attrs["rhs_offset"], wide)
    value = b.fadd(
        b.fmul(lhs, _const(wide, float(attrs["lhs_multiplier"]))),
        b.fmul(rhs, _const(wide, float(attrs["rhs_multiplier"]))),
    )
    return int8_conv.round_to_output(k, value)


def by_lanes(k: Kernel, count: int, block) -> None:
    """This part's share of ``count`` elements: ``block(index, LANES)`` on whole vectors,
    then ``block(index, 1)`` on the tail (parts are whole multiples of ``LANES``)."""
    b = k.b
    start, stop = k.split(count, grain=LANES)
    whole = b.add(start, b.mul(b.udiv(b.sub(stop, start), i64(LANES)), i64(LANES)))
    with for_range(b, whole, start, step=LANES, name="block") as i:
        block(i, LANES)
    with for_range(b, stop, whole, name="tail") as i:
        block(i, 1)


def byte_at(b: ir.IRBuilder, pointer: ir.Value, index: ir.Value) -> ir.Value:
    return b.gep(pointer, [index], inbounds=True, source_etype=I8)


def lanes_of(ty: ir.Type, lanes: int) -> ir.Type:
    """``ty``, or a vector of ``lanes`` of it."""
    return ir.VectorType(ty, lanes) if lanes > 1 else ty


@emits("QuantizedAdd", kinds=QUANTIZED_KINDS)
def emit_quantized_add(k: Kernel) -> None:
    assert not k.epilogue, "QuantizedAdd cannot apply a fused epilogue"
    b = k.b
    dest, lhs, rhs = k.dest, *k.sources

    def block(i: ir.Value, lanes: int) -> None:
        a = b.load(byte_at(b, lhs.ptr, i), typ=lanes_of(I8, lanes), align=1)
        c = b.load(byte_at(b, rhs.ptr, i), typ=lanes_of(I8, lanes), align=1)
        b.store(_sum(k, a, c, lanes), byte_at(b, dest.ptr, i), align=1)

    by_lanes(k, k.types[0].size, block)
