"""QuantizeLinear (per tensor, float32 to int8/uint8) as one pass over the data.

The node's lowering, the reference, is ``clip(round_half_even(x / scale) + zero_point)`` in
float32, with round-half-even built from Floor, compares and selects (about ten
element-wise operations; the largest part of what an int8 MobileNetV2 spends outside its
layers goes to quantizing its input). Here the division is the same IEEE float32 division,
``llvm.roundeven`` (``vroundps`` with round-to-nearest-even on x86) is round half to even
exactly, and the zero point and the bounds are small integers: the same operations in the
same order, so the result is bit-equal to the interpreter's for every finite input and
for the infinities (saturated). NaN has no integer; both give an unspecified value.
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.graph.nodes.quantized import QUANTIZED_KINDS
from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, emits, intrinsic
from glow_cpu.kernels.int8_add import by_lanes, byte_at, lanes_of
from glow_cpu.loops import F32, I8, I32


@emits("QuantizeLinear", kinds=QUANTIZED_KINDS)
def emit_quantize_linear(k: Kernel) -> None:
    assert not k.epilogue, "QuantizeLinear cannot apply a fused epilogue"
    b = k.b
    dest, (x, scale, zero) = k.dest, k.sources
    info = (0, 255) if dest.elem is ElemKind.uint8 else (-128, 127)
    divisor = b.load(scale.ptr, typ=F32)
    raw_zero = b.load(zero.ptr, typ=I8)
    widened = b.zext(raw_zero, I32) if zero.elem is ElemKind.uint8 else b.sext(raw_zero, I32)
    zero_point = b.sitofp(widened, F32)

    def spread(value: ir.Value, lanes: int) -> ir.Value:
        if lanes == 1:
            return value
        ty = ir.VectorType(value.type, lanes)
        one = b.insert_element(ir.Constant(ty, None), value, ir.Constant(I32, 0))
        return b.shuffle_vector(
            one, ir.Constant(ty, None), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        )

    def block(i: ir.Value, lanes: int) -> None:
        wide = lanes_of(F32, lanes)
        address = b.gep(x.ptr, [i], inbounds=True, source_etype=F32)
        value = b.fdiv(b.load(address, typ=wide, align=4), spread(divisor, lanes))
        suffix = f"v{lanes}f32" if lanes > 1 else "f32"
        value = b.call(intrinsic(k.module, f"llvm.roundeven.{suffix}", wide, [wide]), [value])
        value = b.fadd(value, spread(zero_point, lanes))
        low, high = (spread(ir.Constant(F32, float(v)), lanes) for v in info)
        value = b.select(b.fcmp_ordered("<", value, low), low, value)
        value = b.select(b.fcmp_ordered(">", value, high), high, value)
        narrow = b.trunc(b.fptosi(value, lanes_of(I32, lanes)), lanes_of(I8, lanes))
        b.store(narrow, byte_at(b, dest.ptr, i), align=1)

    by_lanes(k, k.types[0].size, block)
