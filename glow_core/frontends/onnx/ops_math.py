"""Importers for element-wise math, activations, matrix products, normalizations, reductions.

ONNX's numpy-style broadcasting is made explicit here through the builder's broadcasting
helpers, because glow's primitives only ever see operands of one type.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.linear_quant import round_half_even
from glow_core.types import ElemKind

_UNARY_KINDS = {
    "Relu": "Relu",
    "Sigmoid": "Sigmoid",
    "Tanh": "Tanh",
    "Erf": "Erf",
    "Sqrt": "Sqrt",
    "Exp": "Exp",
    "Log": "Log",
}


@importer(*_UNARY_KINDS)
def _unary(ctx: NodeContext) -> Node:
    return ctx.b.create(_UNARY_KINDS[ctx.op_type], ctx.node(0), name=ctx.name)


_SIGN_OPS = {"Neg": build.negate, "Abs": build.absolute}
"""glow has no sign primitives: both are built from Sub/Max in ``build.py``, their one home."""


@importer(*_SIGN_OPS, fold="int")
def _sign_op(ctx: NodeContext) -> Node:
    return _SIGN_OPS[ctx.op_type](ctx.b, ctx.node(0), name=ctx.name)


@importer("Reciprocal")
def _reciprocal(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    return ctx.b.Div(ctx.b.splat(1.0, x), x, name=ctx.name)


def _node_as(ctx: NodeContext, index: int, like: Node) -> Node:
    """Input ``index`` in ``like``'s element kind (ONNX Pow allows an int exponent)."""
    if ctx.is_static(index):
        array = ctx.static(index, "exponent")
        if array.dtype != like.type.dtype:
            return ctx.constant(array.astype(like.type.dtype), "exponent")
    value = ctx.node(index)
    if value.type.elem != like.type.elem:
        return ctx.b.Convert(value, elem=like.type.elem.name)
    return value


@importer("Add", "Sub", "Mul", "Div", "Pow", fold="int")
def _binary(ctx: NodeContext) -> Node:
    lhs = ctx.node(0)
    if ctx.op_type == "Pow" and not lhs.type.elem.is_float:
        return _integer_pow(ctx, lhs)
    rhs = _node_as(ctx, 1, lhs) if ctx.op_type == "Pow" else ctx.node(1)
    return getattr(ctx.b, ctx.op_type.lower())(lhs, rhs, name=ctx.name)


def _integer_pow(ctx: NodeContext, base: Node) -> Node:
    """An integer base: Pow in float32, then back to the base's kind.

    An integer exponent gives an integer, so the float result is rounded (it may land a hair
    below it); a float exponent truncates, as ONNX's cast of the float power does.
    """
    b = ctx.b
    exponent = ctx.node(1)
    power = b.pow(b.Convert(base, elem="float32"), build.convert(b, exponent, ElemKind.float32))
    if not exponent.type.elem.is_float:
        power = round_half_even(b, power)
    return b.Convert(power, elem=base.type.elem.name, name=ctx.name)


_VARIADIC = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}


@importer(*_VARIADIC, fold="int")
def _variadic(ctx: NodeContext) -> Node:
    """Max/Min/Sum/Mean of any number of broadcasting operands, folded left to right."""
    operands = [ctx.node(i) for i in range(len(ctx.proto.input)) if ctx.has(i)]
    if not operands:
        raise ctx.invalid("needs at least one input, and every input it names is empty")
    combine = getattr(ctx.b, _VARIADIC[ctx.op_type])
    result = operands[0]
    for index, other in enumerate(operands[1:], start=2):
        last = index == len(operands) and ctx.op_type != "Mean"
        result = combine(result, other, name=ctx.name if last else None)
    if ctx.op_type == "Mean" and len(operands) > 1:
        result = ctx.b.Div(result, ctx.b.splat(len(operands), result), name=ctx.name)
    return result


@importer("Clip")
def _clip(ctx: NodeContext) -> Node:
    """Bounds are attributes before opset 11 and optional inputs after (run-time ones too)."""
    x = ctx.node(0)
    runtime = [i for i in (1, 2) if ctx.opset >= 11 and ctx.has(i) and not ctx.is_static(i)]
    if runtime:  # max(x, low) then min(., high): ONNX's "min > max gives max" holds as well
        y = ctx.b.max(x, ctx.node(1)) if ctx.has(1) else x
        return ctx.b.min(y, ctx.node(2), name=ctx.name) if ctx.has(2) else y
    if ctx.opset < 11:
        low, high = ctx.attr("min", -math.inf), ctx.attr("max", math.inf)
    else:
        low = ctx.scalar(1, "min") if ctx.has(1) else -math.inf
        high = ctx.scalar(2, "max") if ctx.has(2) else math.inf
    # ONNX: when min > max every element becomes max.
    return ctx.b.Clip(x, low=min(low, high), high=high, name=ctx.name)


@importer("LeakyRelu")
def _leaky_relu(ctx: NodeContext) -> Node:
    return ctx.b.LeakyRelu(ctx.node(0), alpha=float(ctx.attr("alpha", 0.01)), name=ctx.name)


@importer("HardSigmoid", "HardSwish")
def _hard_sigmoid(ctx: NodeContext) -> Node:
    """One node: clip(alpha * x + beta, 0, 1), times x for HardSwish (alpha 1/6, beta 1/2)."""
    if ctx.op_type == "HardSwish":
        return ctx.b.HardSwish(ctx.node(0), name=ctx.name)
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    return ctx.b.HardSigmoid(ctx.node(0), alpha=alpha, beta=beta, name=ctx.name)


# ---- matrix products -------------------------------------------------------------------


def _transposed(ctx: NodeContext, index: int, transpose: int) -> Node:
    """A 2-D Gemm operand, transposed at load time when it is a constant weight."""
    if not transpose:
        return ctx.node(index)
    if ctx.is_static(index):
        array = ctx.static(index, "matrix")
        if array.ndim == 2:
            return ctx.constant(array.T, f"{ctx.proto.input[index]}_T")
    return ctx.b.transpose(ctx.node(index), (1, 0))


@importer("Gemm", ranks={0: 2, 1: 2, 2: Rank.between(0, 2)})
def _gemm(ctx: NodeContext) -> Node:
    """alpha * A' @ B' + beta * C; a plain dense layer becomes one FullyConnected node."""
    a = _transposed(ctx, 0, ctx.attr("transA", 0))
    w = _transposed(ctx, 1, ctx.attr("transB", 0))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    c = ctx.optional_node(2) if beta != 0.0 else None
    b = ctx.b
    dense = c is not None and alpha == 1.0 and beta == 1.0 and w.type.rank == 2
    if dense and c.type.shape == (w.type.shape[-1],):  # type: ignore[union-attr]
        return b.FullyConnected(a, w, c, name=ctx.name)
    product = b.MatMul(a, w, name=ctx.name if alpha == 1.0 and c is None else None)
    if alpha != 1.0:
        product = b.Mul(product, b.splat(alpha, product), name=ctx.name if c is None else None)
    if c is None:
        return product
    if beta != 1.0:
        c = b.Mul(c, b.splat(beta, c))
    return b.add(product, c, name=ctx.name)


@importer("MatMul")
def _matmul(ctx: NodeContext) -> Node:
    return ctx.b.matmul(ctx.node(0), ctx.node(1), name=ctx.name)


# ---- softmax and normalizations ----------------------------------------------------


def _hardmax(b: Builder, x: Node, axis: int, name: str | None) -> Node:
    """1.0 at the first maximum along ``axis``, 0.0 elsewhere: ArgMax compared with an iota."""
    winner = b.Broadcast(b.ArgMax(x, axis=axis), shape=x.type.shape)
    positions = np.arange(x.type.shape[axis], dtype=np.int64).reshape(
        [-1 if i == axis else 1 for i in range(x.type.rank)]
    )
    iota = b.broadcast_to(build.constant(b, positions, "iota"), x.type.shape)
    return b.Convert(b.Compare(iota, winner, predicate="eq"), elem=x.type.elem.name, name=name)


def _softmax_kind(b: Builder, op_type: str, x: Node, axis: int, name: str | None) -> Node:
    if op_type == "Softmax":
        return b.Softmax(x, axis=axis, name=name)
    if op_type == "LogSoftmax":
        return b.LogSoftmax(x, axis=axis, name=name)
    return _hardmax(b, x, axis, name)


@importer("Softmax", "LogSoftmax", "Hardmax", ranks={0: Rank.at_least(1)})
def _softmax(ctx: NodeContext) -> Node:
    """Opset 13+: one axis. Before: flatten to 2-D at ``axis``, normalize rows, reshape back."""
    x = ctx.node(0)
    if ctx.opset >= 13:
        axis = ctx.axis_attr("axis", -1, x.type.rank)
        return _softmax_kind(ctx.b, ctx.op_type, x, axis, ctx.name)
    shape = x.type.shape
    axis = ctx.axis_attr("axis", 1, len(shape))
    if axis == len(shape) - 1:
        return _softmax_kind(ctx.b, ctx.op_type, x, axis, ctx.name)
    flat = ctx.b.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return ctx.b.reshape(_softmax_kind(ctx.b, ctx.op_type, flat, 1, ctx.name), shape)


def _cofactor_det(b: Builder, x: Node, rows: list[int], cols: list[int]) -> Node:
    """Determinant of the rows x cols minor of [..., n, n] ``x`` by cofactor expansion."""
    batch = x.type.shape[:-2]

    def element(r: int, c: int) -> Node:
        starts = (0,) * len(batch) + (r, c)
        return b.Reshape(b.Slice(x, starts=starts, ends=(*batch, r + 1, c + 1)), shape=batch)

    if len(rows) == 1:
        return element(rows[0], cols[0])
    total = None
    for k, c in enumerate(cols):
        term = b.Mul(element(rows[0], c), _cofactor_det(b, x, rows[1:], cols[:k] + cols[k + 1 :]))
        total = term if total is None else (b.Sub(total, term) if k % 2 else b.Add(total, term))
    assert total is not None
    return total


@importer("Det", ranks={0: Rank.at_least(2)})
def _det(ctx: NodeContext) -> Node:
    """Closed-form (cofactor) determinant of small matrices, n <= 4."""
    x = ctx.node(0)
    n = x.type.shape[-1]
    if x.type.rank < 2 or x.type.shape[-2] != n or n > 4:
        raise ctx.refuse(f"only square matrices up to 4x4 are supported, got {x.type}")
    return _cofactor_det(ctx.b, x, list(range(n)), list(range(n)))
