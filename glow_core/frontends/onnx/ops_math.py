"""Importers for element-wise math, activations, matrix products, normalizations, reductions.

ONNX's numpy-style broadcasting is made explicit here through the builder's broadcasting
helpers, because glow's primitives only ever see operands of one type.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.node import Node
from glow_core.spec import normalize_axis

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


@importer("Neg", "Abs", fold="int")
def _negate(ctx: NodeContext) -> Node:
    """-x as 0 - x (exact); |x| as max(x, -x), since glow has no sign primitives."""
    x = ctx.node(0)
    if ctx.op_type == "Neg":
        return ctx.b.Sub(ctx.b.splat(0, x), x, name=ctx.name)
    return ctx.b.Max(x, ctx.b.Sub(ctx.b.splat(0, x), x), name=ctx.name)


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
    rhs = _node_as(ctx, 1, lhs) if ctx.op_type == "Pow" else ctx.node(1)
    return getattr(ctx.b, ctx.op_type.lower())(lhs, rhs, name=ctx.name)


_VARIADIC = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}


@importer(*_VARIADIC, fold="int")
def _variadic(ctx: NodeContext) -> Node:
    """Max/Min/Sum/Mean of any number of broadcasting operands, folded left to right."""
    operands = [ctx.node(i) for i in range(len(ctx.proto.input)) if ctx.has(i)]
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
    """Bounds are attributes before opset 11 and optional constant inputs after."""
    x = ctx.node(0)
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
    """clip(alpha * x + beta, 0, 1), times x for HardSwish (alpha 1/6, beta 1/2)."""
    x = ctx.node(0)
    swish = ctx.op_type == "HardSwish"
    alpha = 1.0 / 6.0 if swish else float(ctx.attr("alpha", 0.2))
    beta = 0.5 if swish else float(ctx.attr("beta", 0.5))
    linear = ctx.b.Add(ctx.b.Mul(x, ctx.b.splat(alpha, x)), ctx.b.splat(beta, x))
    gate = ctx.b.Clip(linear, low=0.0, high=1.0, name=None if swish else ctx.name)
    return ctx.b.Mul(x, gate, name=ctx.name) if swish else gate


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


@importer("Gemm")
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


@importer("Softmax")
def _softmax(ctx: NodeContext) -> Node:
    """Opset 13+: one axis. Before: flatten to 2-D at ``axis``, softmax rows, reshape back."""
    x = ctx.node(0)
    if ctx.opset >= 13:
        return ctx.b.Softmax(x, axis=int(ctx.attr("axis", -1)), name=ctx.name)
    shape = x.type.shape
    axis = normalize_axis(int(ctx.attr("axis", 1)), len(shape), x.type)
    if axis == len(shape) - 1:
        return ctx.b.Softmax(x, axis=axis, name=ctx.name)
    flat = ctx.b.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return ctx.b.reshape(ctx.b.Softmax(flat, axis=1, name=ctx.name), shape)


@importer("BatchNormalization")
def _batch_norm(ctx: NodeContext) -> Node:
    """Inference form only: the running-statistics outputs of training cannot be produced."""
    if ctx.attr("training_mode", 0):
        raise ctx.refuse("training_mode=1 is not supported; export the model in eval mode")
    if ctx.opset < 9 and ctx.attr("spatial", 1) != 1:
        raise ctx.refuse("spatial=0 (per-activation statistics) is not supported")
    operands = [ctx.node(i) for i in range(5)]
    return ctx.b.BatchNorm(*operands, epsilon=float(ctx.attr("epsilon", 1e-5)), name=ctx.name)


@importer("LayerNormalization")
def _layer_norm(ctx: NodeContext) -> Node:
    x, scale = ctx.node(0), ctx.node(1)
    bias = ctx.optional_node(2)
    if bias is None:
        bias = ctx.constant(np.zeros(scale.type.shape, scale.type.dtype), "zero_bias")
    axis, epsilon = int(ctx.attr("axis", -1)), float(ctx.attr("epsilon", 1e-5))
    return ctx.b.LayerNorm(x, scale, bias, axis=axis, epsilon=epsilon, name=ctx.name)


# ---- reductions --------------------------------------------------------------------------

_REDUCE_KINDS = {
    "ReduceMean": "ReduceMean",
    "ReduceSum": "ReduceSum",
    "ReduceMax": "ReduceMax",
    "ReduceMin": "ReduceMax",
}
# The opset from which axes are an input instead of an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


@importer(*_REDUCE_KINDS, fold="int")
def _reduce(ctx: NodeContext) -> Node:
    """Reduce with kept dims (glow's form), then a Reshape drops them unless keepdims."""
    x = ctx.node(0)
    rank = x.type.rank
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, 18):
        axes = ctx.ints(1, "axes") if ctx.has(1) else []
    else:
        axes = list(ctx.attr("axes", []))
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0) or rank == 0:
            return x
        axes = list(range(rank))
    axes = sorted({normalize_axis(a, rank, x.type) for a in axes})
    keep = bool(ctx.attr("keepdims", 1))
    b, kind = ctx.b, _REDUCE_KINDS[ctx.op_type]
    if ctx.op_type == "ReduceMin":  # min(x) = -max(-x), exact
        negated = b.Sub(b.splat(0, x), x)
        reduced = b.create(kind, negated, axes=tuple(axes))
        reduced = b.Sub(b.splat(0, reduced), reduced, name=ctx.name if keep else None)
    else:
        reduced = b.create(kind, x, axes=tuple(axes), name=ctx.name if keep else None)
    if keep:
        return reduced
    shape = tuple(d for i, d in enumerate(x.type.shape) if i not in axes)
    return b.Reshape(reduced, shape=shape, name=ctx.name)
