"""Importers for linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
QLinearMatMul.

Quantization is arithmetic in glow's graph: dequantize is (q - zero_point) * scale in
float, quantize is round-half-even(x / scale) + zero_point clamped to the target's range
and converted. Scales and zero points are per tensor, per axis or per block; they are
broadcast to the data first. Targets are the 8- and 16-bit integers, int32, and the narrow
kinds: int4/uint4/int2/uint2 (clamped like the others), and float8/float4, where
x / scale + zero_point is cast with ONNX's float8 rules (``narrow_cast``) instead of rounded
to an integer.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build, narrow_cast
from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes import linear_quant
from glow_core.narrow import FORMATS, NarrowInt
from glow_core.spec import normalize_axis
from glow_core.types import NARROW_FLOAT_KINDS, ElemKind

_RANGES = {
    kind: (int(np.iinfo(kind.dtype).min), int(np.iinfo(kind.dtype).max))
    for kind in (ElemKind.int8, ElemKind.uint8, ElemKind.int16, ElemKind.uint16, ElemKind.int32)
} | {fmt.kind: (fmt.low, fmt.high) for fmt in FORMATS.values() if isinstance(fmt, NarrowInt)}
"""Integer targets and the range their results are clamped to."""

_FLOAT_TARGETS = NARROW_FLOAT_KINDS - {ElemKind.float8_e8m0fnu}  # E8M0 is a scale format, never quantized to


def dequantize(b: Builder, q: Node, scale: Node, zero: Node | None, axis: int, block: int) -> Node:
    """(q - zero_point) * scale, in the scale's float kind (narrow q and zero point decoded)."""
    return linear_quant.dequantize(b, q, scale, zero, axis, block, cast=narrow_cast.cast)


def quantize(
    b: Builder,
    x: Node,
    scale: Node,
    zero: Node | None,
    target: ElemKind,
    axis: int,
    block: int,
    saturate: bool = True,
) -> Node:
    """clamp(round(x / scale) + zero_point) in integer ``target`` (round half to even, as
    ONNX); for a float8/float4 ``target``, x / scale + zero_point cast to it (``saturate``
    as in Cast). Raises KeyError for a target glow cannot quantize to."""
    if target in _RANGES:
        return linear_quant.quantize(
            b, x, scale, zero, target, axis, block, bounds=_RANGES[target], cast=narrow_cast.cast
        )
    if target not in _FLOAT_TARGETS:
        raise KeyError(target)
    q = linear_quant.scale_and_shift(b, x, scale, zero, axis, block, rounded=False, cast=narrow_cast.cast)
    return narrow_cast.encode(b, q, target, saturate=saturate)


def _per_tensor(x: Node, scale: Node, zero: Node | None) -> bool:
    """Whether a QuantizeLinear is the plain kind the QuantizeLinear node declares."""
    plain_zero = zero is None or zero.type.shape == ()
    return (
        scale.type.rank == 0
        and scale.type.elem is ElemKind.float32
        and x.type.elem is ElemKind.float32
        and plain_zero
    )


def _is_node_form(q: Node, scale: Node, zero: Node | None, axis: int, block: int) -> bool:
    """Whether a DequantizeLinear is the plain kind the DequantizeLinear node declares (int8,
    uint8 or int32 input, float32 scale per tensor or per axis): the form QDQ models use,
    kept whole so ``fold-qdq`` can find their integer layers."""
    if block or scale.type.elem is not ElemKind.float32 or q.type.rank == 0:
        return False
    if q.type.elem not in (ElemKind.int8, ElemKind.uint8, ElemKind.int32):
        return False
    if zero is not None and (zero.type.elem is not q.type.elem or zero.type.shape != scale.type.shape):
        return False
    if scale.type.rank == 0:
        return True
    try:
        axis = normalize_axis(axis, q.type.rank)
    except ShapeError:  # an out-of-range axis: the arithmetic path reports it
        return False
    return scale.type.rank == 1 and scale.type.shape[0] == q.type.shape[axis]


def _target(ctx: NodeContext, zero_index: int) -> ElemKind:
    """QuantizeLinear's output kind: the zero point's, else output_dtype, else uint8."""
    if ctx.has(zero_index):
        return ctx.node(zero_index).type.elem
    if not ctx.attr("output_dtype"):
        return ElemKind.uint8  # ONNX's default when neither says otherwise
    return ctx.elem_attr("output_dtype")


@importer("QuantizeLinear")
def _quantize_linear(ctx: NodeContext) -> Node:
    target = _target(ctx, 2)
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    saturate = bool(ctx.attr("saturate", 1))
    x, scale, zero = ctx.node(0), ctx.node(1), ctx.optional_node(2)
    if target in (ElemKind.int8, ElemKind.uint8) and not block and _per_tensor(x, scale, zero):
        zero = zero if zero is not None else build.constant(ctx.b, np.zeros((), target.dtype), "zero_point")
        return ctx.b.create("QuantizeLinear", x, scale, zero, name=ctx.name)
    try:
        return quantize(ctx.b, ctx.node(0), ctx.node(1), ctx.optional_node(2), target, axis, block, saturate)
    except KeyError:
        known = ", ".join(sorted(k.name for k in (*_RANGES, *_FLOAT_TARGETS)))
        raise ctx.refuse(f"quantizing to {target.name} is not supported (targets: {known})") from None


@importer("DequantizeLinear")
def _dequantize_linear(ctx: NodeContext) -> Node:
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    q, scale, zero = ctx.node(0), ctx.node(1), ctx.optional_node(2)
    if _is_node_form(q, scale, zero, axis, block) and not ctx.attr("output_dtype"):
        zero = (
            zero
            if zero is not None
            else build.constant(ctx.b, np.zeros(scale.type.shape, q.type.dtype), "zero")
        )
        return ctx.b.create(
            "DequantizeLinear",
            q,
            scale,
            zero,
            axis=normalize_axis(axis, q.type.rank) if scale.type.rank else 0,
            name=ctx.name,
        )
    y = dequantize(ctx.b, q, scale, zero, axis, block)
    if ctx.attr("output_dtype"):
        y = build.convert(ctx.b, y, ctx.elem_attr("output_dtype"))
    return y


@importer("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext) -> Node:
    """Dequantize both operands, MatMul in float32, quantize with the output's scale and zero point."""
    b = ctx.b
    a = dequantize(b, ctx.node(0), build.convert(b, ctx.node(1), ElemKind.float32), ctx.node(2), 1, 0)
    w = dequantize(b, ctx.node(3), build.convert(b, ctx.node(4), ElemKind.float32), ctx.node(5), 1, 0)
    product = b.matmul(a, w)
    zero = ctx.node(7)
    return quantize(b, product, ctx.node(6), zero, zero.type.elem, 1, 0)


@importer("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx: NodeContext) -> list[Node]:
    """uint8 quantization with the scale and zero point of x's own range (widened to hold 0):
    scale = (max - min) / 255 (1 / 255 when max == min), zero point = round(-min / scale)."""
    b = ctx.b
    x = build.convert(b, ctx.node(0), ElemKind.float32)
    flat = b.reshape(x, (x.type.size,))
    largest = b.reshape(b.ReduceMax(flat, axes=(0,)), ())
    smallest = build.negate(b, b.reshape(b.ReduceMax(build.negate(b, flat), axes=(0,)), ()))
    zero, one = b.splat(0.0, largest), b.splat(1.0, largest)
    high, low = b.Max(largest, zero), b.Min(smallest, zero)
    span = b.Select(b.Compare(high, low, predicate="eq"), one, b.Sub(high, low))
    scale = b.Div(span, b.splat(255.0, zero))
    raw = b.Sub(zero, b.Div(low, scale))
    # A NaN zero point (NaN inputs) is 255, as ONNX's max(0, min(255, zp)) evaluates it.
    clipped = b.Select(
        b.Compare(raw, raw, predicate="eq"), b.Clip(raw, low=0.0, high=255.0), b.splat(255.0, raw)
    )
    zero_point = linear_quant.round_half_even(b, clipped)
    q = linear_quant.round_half_even(b, b.Div(x, b.broadcast_to(scale, x.type.shape)))
    q = b.Clip(b.Add(q, b.broadcast_to(zero_point, x.type.shape)), low=0.0, high=255.0)
    uint8 = ElemKind.uint8.name
    return [b.Convert(q, elem=uint8), scale, b.Convert(zero_point, elem=uint8)]
