"""Importers for integer and quantized products: MatMulInteger, ConvInteger, QLinearConv.

The 8-bit operands are centered on their zero points and multiplied in float64, where every
product and every sum of up to 2^37 of them is exact, so the int32 result is the exact
integer accumulation ONNX defines; a backend without float64 MatMul/Convolution refuses
these at compile time. QLinearConv then requantizes (round half to even, saturate) as
QuantizeLinear does.
"""

from __future__ import annotations

from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.ops_quant import dequantize, quantize
from glow_core.frontends.onnx.ops_window import conv_layer
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind

EXACT = ElemKind.float64
"""The kind integer products are computed in: exact for int8/uint8 operands."""


def _centered(b: Builder, q: Node, zero: Node | None, axis_shape: tuple[int, ...]) -> Node:
    """``q - zero`` in float64; a per-axis ``zero`` is reshaped to ``axis_shape`` first."""
    x = build.convert(b, q, EXACT)
    if zero is None:
        return x
    z = build.convert(b, zero, EXACT)
    z = b.reshape(z, ()) if z.type.size == 1 else b.reshape(z, axis_shape)
    return b.Sub(x, b.broadcast_to(z, x.type.shape))


def _check_8bit(ctx: NodeContext, *values: Node) -> None:
    for v in values:
        if v.type.elem not in (ElemKind.int8, ElemKind.uint8):
            raise ctx.refuse(f"{ctx.op_type} takes int8/uint8 operands, got {v.type}")


_ZERO_POINT = Rank.between(0, 1)
"""A zero point is a scalar, or a vector per row / column / channel."""


@importer("MatMulInteger", ranks={0: Rank.at_least(1), 1: Rank.at_least(1), 2: _ZERO_POINT, 3: _ZERO_POINT})
def _matmul_integer(ctx: NodeContext) -> Node:
    """(A - a_zero_point) @ (B - b_zero_point) in int32: a per-row A zero point is [M], a
    per-column B zero point is [N]."""
    a, b_ = ctx.node(0), ctx.node(1)
    _check_8bit(ctx, a, b_)
    b = ctx.b
    rows = (a.type.shape[-2], 1) if a.type.rank >= 2 else (1,)
    left = _centered(b, a, ctx.optional_node(2), rows)
    right = _centered(b, b_, ctx.optional_node(3), (b_.type.shape[-1],))
    return build.convert(b, b.matmul(left, right), ElemKind.int32, name=ctx.name)


@importer("ConvInteger", ranks={0: Rank.at_least(3), 1: Rank.at_least(3), 2: _ZERO_POINT, 3: _ZERO_POINT})
def _conv_integer(ctx: NodeContext) -> Node:
    """Conv(x - x_zero_point, w - w_zero_point) in int32; a per-channel w zero point is [M]."""
    x, w = ctx.node(0), ctx.node(1)
    _check_8bit(ctx, x, w)
    b = ctx.b
    channels = (w.type.shape[0],) + (1,) * (w.type.rank - 1)
    centered_x = _centered(b, x, ctx.optional_node(2), (1,) * x.type.rank)
    centered_w = _centered(b, w, ctx.optional_node(3), channels)
    return build.convert(b, conv_layer(ctx, centered_x, centered_w, None), ElemKind.int32, name=ctx.name)


@importer("QLinearConv", ranks={0: Rank.at_least(3), 3: Rank.at_least(3), 8: 1})
def _qlinear_conv(ctx: NodeContext) -> Node:
    """Dequantized x and w convolved (with the int32 bias at scale x_scale * w_scale), then
    quantized to y's scale and zero point; per-channel w scales and zero points are [M].
    ``dequantize`` computes in its scale's kind, so float64 scales make the product exact."""
    x, w = ctx.node(0), ctx.node(3)
    _check_8bit(ctx, x, w)
    b = ctx.b
    x_scale, w_scale, y_scale = (build.convert(b, ctx.node(i), EXACT) for i in (1, 4, 6))
    real_x = dequantize(b, x, x_scale, ctx.node(2), 1, 0)
    real_w = dequantize(b, w, w_scale, ctx.node(5), 0, 0)
    bias = ctx.optional_node(8)
    if bias is not None:
        channels = (w.type.shape[0],)
        scale = b.Mul(
            b.broadcast_to(b.reshape(x_scale, ()), channels),
            b.broadcast_to(b.reshape(w_scale, (-1,)), channels),
        )
        bias = b.Mul(build.convert(b, bias, EXACT), scale)
    y = conv_layer(ctx, real_x, real_w, bias)
    return quantize(b, y, y_scale, ctx.node(7), ctx.node(7).type.elem, 1, 0)
