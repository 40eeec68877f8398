"""Importers for reductions: ReduceX over axes, and ArgMax/ArgMin.

Every ONNX reduction is a ReduceSum or ReduceMax (glow's two reduction primitives, which
keep reduced dims with size 1) wrapped in element-wise math; ReduceProd is the last element
of a running product. A Reshape afterwards drops the kept dims unless ``keepdims``.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, Value, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind

_REDUCTIONS = (
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)
# The opset from which axes are an input instead of an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}
# What each reduction gives over an empty set (ONNX 18 defines these).
_EMPTY = {
    "ReduceMax": -math.inf,
    "ReduceMin": math.inf,
    "ReduceProd": 1,
    "ReduceLogSum": -math.inf,
    "ReduceLogSumExp": -math.inf,
}


def _empty_value(op: str, dtype: np.dtype) -> float | int | bool:
    """The identity of ``op`` in ``dtype``: what it gives over an empty set."""
    value = _EMPTY.get(op, 0)
    if dtype == np.bool_:
        return op == "ReduceMin"
    if dtype.kind in "iu" and math.isinf(value):
        info = np.iinfo(dtype)
        return info.min if value < 0 else info.max
    return value


def _axes(ctx: NodeContext, rank: int) -> list[int] | None:
    """The sorted reduced axes; None when no axis is reduced (noop_with_empty_axes, or a
    scalar input): each element is then reduced on its own (``_reduce_alone``)."""
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, 18):
        axes = ctx.ints(1, "axes") if ctx.has(1) else []
    else:
        axes = list(ctx.attr("axes", []))
    if not axes:
        if ctx.flag_attr("noop_with_empty_axes", 0) or rank == 0:
            return None
        axes = list(range(rank))
    return sorted({ctx.axis(int(a), rank, f"axes {list(axes)}: axis") for a in axes})


def _product(b: Builder, x: Node, axes: tuple[int, ...]) -> Node:
    """Product over ``axes`` (kept with size 1): the last element of a running product."""
    rest = [i for i in range(x.type.rank) if i not in axes]
    moved = b.transpose(x, rest + list(axes)) if rest + list(axes) != list(range(x.type.rank)) else x
    kept = [x.type.shape[i] for i in rest]
    flat = b.reshape(moved, (*kept, math.prod(x.type.shape[a] for a in axes)))
    running = b.CumReduce(flat, axis=len(kept), op="prod")
    n = flat.type.shape[-1]
    last = b.Slice(running, starts=(0,) * len(kept) + (n - 1,), ends=(*kept, n))
    return b.Reshape(last, shape=tuple(1 if i in axes else d for i, d in enumerate(x.type.shape)))


def _operand(ctx: NodeContext) -> Node:
    """The reduced input; a narrow kind (int4, float8...) is held as bytes that only casts
    decode, so its order and arithmetic are refused here rather than computed on bytes."""
    x = ctx.node(0)
    if x.type.elem.is_narrow:
        raise ctx.refuse(f"input 0 is {x.type}; narrow kinds are only cast (Cast, DequantizeLinear)")
    return x


def _reduce_alone(b: Builder, op: str, x: Node, name: str) -> Node:
    """The reduction over no axes: every element is a group of one, so ReduceL1 and ReduceL2
    give |x|, ReduceSumSquare x * x, ReduceLogSum log(x), and the rest x itself. This is what
    ONNX defines for ``noop_with_empty_axes`` (onnx.reference and onnxruntime agree): "no
    reduction" still applies the reduction's element-wise part."""
    if op in ("ReduceL1", "ReduceL2"):
        return build.absolute(b, x, name=name)
    if op == "ReduceSumSquare":
        return b.Mul(x, x, name=name)
    if op == "ReduceLogSum":
        return b.Log(x, name=name)
    return x


def _reduce_kept(b: Builder, op: str, x: Node, axes: tuple[int, ...]) -> Node:
    """The reduction with reduced dims kept (size 1)."""
    if op in ("ReduceSum", "ReduceMax"):
        return b.create(op, x, axes=axes)
    if op == "ReduceMin":  # min(x) = r(max(r(x))) for the order reversal r (an involution), exact
        return _order_reversed(b, b.ReduceMax(_order_reversed(b, x), axes=axes))
    if op == "ReduceProd":
        return _product(b, x, axes)
    if op == "ReduceMean":
        return b.ReduceMean(x, axes=axes)
    if op == "ReduceL1":
        return b.ReduceSum(build.absolute(b, x), axes=axes)
    if op in ("ReduceL2", "ReduceSumSquare"):
        total = b.ReduceSum(b.Mul(x, x), axes=axes)
        return b.Sqrt(total) if op == "ReduceL2" else total
    if op == "ReduceLogSum":
        return b.Log(b.ReduceSum(x, axes=axes))
    # ReduceLogSumExp: max + log(sum(exp(x - max))), finite for large x
    peak = b.ReduceMax(x, axes=axes)
    shifted = b.Sub(x, b.Broadcast(peak, shape=x.type.shape))
    return b.Add(peak, b.Log(b.ReduceSum(b.Exp(shifted), axes=axes)))


@importer(*_REDUCTIONS, fold="int")
def _reduce(ctx: NodeContext) -> Value:
    x = _operand(ctx)
    axes = _axes(ctx, x.type.rank)
    if axes is None:
        return _reduce_alone(ctx.b, ctx.op_type, x, ctx.name)
    keep = ctx.flag_attr("keepdims", 1)
    kept_shape = tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))
    shape = kept_shape if keep else tuple(d for i, d in enumerate(x.type.shape) if i not in axes)
    if x.type.size == 0:  # a reduction over nothing is its identity, known now
        return np.full(shape, _empty_value(ctx.op_type, x.type.dtype), dtype=x.type.dtype)
    if x.type.elem is ElemKind.bool and ctx.op_type in ("ReduceMax", "ReduceMin"):
        # any / all: reduce as int8, then back to bool.
        wide = _reduce_kept(ctx.b, ctx.op_type, ctx.b.Convert(x, elem="int8"), tuple(axes))
        return ctx.b.Convert(ctx.b.Reshape(wide, shape=shape), elem="bool", name=ctx.name)
    reduced = _reduce_kept(ctx.b, ctx.op_type, x, tuple(axes))
    return ctx.b.Reshape(reduced, shape=shape, name=ctx.name)


def _order_reversed(b: Builder, x: Node) -> Node:
    """``x`` mapped so that its order is exactly reversed (ties kept), by an involution: -x for
    floats, not x for bools, and ~x (-1 - x, or max - x unsigned) for integers, where -x
    would overflow at the type's minimum and wrap every unsigned value but 0."""
    if x.type.elem.is_float:
        return build.negate(b, x)
    if x.type.elem is ElemKind.bool:
        return build.logical_not(b, x)
    top = -1 if x.type.dtype.kind == "i" else int(np.iinfo(x.type.dtype).max)
    return b.Sub(b.splat(top, x), x)


@importer("ArgMax", "ArgMin", fold="always", ranks={0: Rank.at_least(1)})
def _arg_extreme(ctx: NodeContext) -> Node:
    """ArgMin(x) = ArgMax(x in reversed order); keepdims=0 drops the reduced axis."""
    x = _operand(ctx)
    axis = ctx.axis_attr("axis", 0, x.type.rank)
    source = x if ctx.op_type == "ArgMax" else _order_reversed(ctx.b, x)
    last = ctx.flag_attr("select_last_index", 0)
    index = ctx.b.ArgMax(source, axis=axis, select_last=last, name=ctx.name)
    if ctx.flag_attr("keepdims", 1):
        return index
    return ctx.b.Reshape(index, shape=tuple(d for i, d in enumerate(x.type.shape) if i != axis))
