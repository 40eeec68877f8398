"""Importers for comparisons, boolean logic, selection and integer-valued rounding.

All of them lower to two primitives, Compare and Select, plus Floor for the rounding
family; with every input known at load time they are folded instead (shape arithmetic).
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import UnsupportedOpError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, elem_kind_of, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.linear_quant import round_half_even
from glow_core.types import UNSIGNED_INT_KINDS, ElemKind

_COMPARISONS = {
    "Equal": "eq",
    "Less": "lt",
    "LessOrEqual": "le",
    "Greater": "gt",
    "GreaterOrEqual": "ge",
}


@importer(*_COMPARISONS, fold="always")
def _compare(ctx: NodeContext) -> Node:
    lhs, rhs = ctx.node(0), ctx.node(1)
    return build.compare(ctx.b, lhs, rhs, _COMPARISONS[ctx.op_type], name=ctx.name)


@importer("Not", fold="always")
def _not(ctx: NodeContext) -> Node:
    return build.logical_not(ctx.b, ctx.node(0), name=ctx.name)


@importer("And", "Or", "Xor", fold="always")
def _logical(ctx: NodeContext) -> Node:
    """a and b = a ? b : false; a or b = a ? true : b; a xor b = a != b."""
    a, b = build.broadcast(ctx.b, ctx.node(0), ctx.node(1))
    if ctx.op_type == "Xor":
        return build.compare(ctx.b, a, b, "ne", name=ctx.name)
    if ctx.op_type == "And":
        return ctx.b.Select(a, b, ctx.b.splat(False, b), name=ctx.name)
    return ctx.b.Select(a, ctx.b.splat(True, b), b, name=ctx.name)


@importer("Where", fold="always")
def _where(ctx: NodeContext) -> Node:
    return build.select(ctx.b, ctx.node(0), ctx.node(1), ctx.node(2), name=ctx.name)


@importer("IsNaN")
def _is_nan(ctx: NodeContext) -> Node:
    """NaN is the only value not equal to itself."""
    x = ctx.node(0)
    return build.compare(ctx.b, x, x, "ne", name=ctx.name)


@importer("IsInf")
def _is_inf(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    positive, negative = bool(ctx.attr("detect_positive", 1)), bool(ctx.attr("detect_negative", 1))
    if not positive and not negative:
        return b.splat(False, x.type.with_elem(ElemKind.bool), name=ctx.name)
    if positive and negative:
        return b.Compare(build.absolute(b, x), b.splat(math.inf, x), predicate="eq", name=ctx.name)
    target = math.inf if positive else -math.inf
    return b.Compare(x, b.splat(target, x), predicate="eq", name=ctx.name)


@importer("Sign", fold="always")
def _sign(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    zero = b.splat(0, x)
    unsigned = x.type.dtype.kind in "ub"  # never below zero (and -1 does not fit)
    rest = x if x.type.elem.is_float else zero  # x itself: sign(0) = 0 and sign(NaN) = NaN
    below = rest if unsigned else b.Select(b.Compare(x, zero, predicate="lt"), b.splat(-1, x), rest)
    return b.Select(b.Compare(zero, x, predicate="lt"), b.splat(1, x), below, name=ctx.name)


@importer("Floor", "Ceil", "Round", fold="always")
def _rounding(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    if not x.type.elem.is_float:
        return x
    if ctx.op_type == "Floor":
        return ctx.b.Floor(x, name=ctx.name)
    if ctx.op_type == "Ceil":
        return build.ceil(ctx.b, x, name=ctx.name)
    return round_half_even(ctx.b, x, name=ctx.name)


@importer("Mod", fold="always")
def _mod(ctx: NodeContext) -> Node:
    """a - b * trunc(a / b) (C fmod); with fmod=0 the result takes the divisor's sign instead."""
    a, d = build.broadcast(ctx.b, ctx.node(0), ctx.node(1))
    b = ctx.b
    quotient = b.Div(a, d)
    if a.type.elem.is_float:
        quotient = build.trunc(b, quotient)
    remainder = b.Sub(a, b.Mul(d, quotient))
    if a.type.elem.is_float:  # x mod +-inf is x (inf * 0 would make it NaN)
        infinite = b.Compare(build.absolute(b, d), b.splat(math.inf, d), predicate="eq")
        remainder = b.Select(infinite, a, remainder)
    if ctx.attr("fmod", 0):
        return remainder
    zero = b.splat(0, a)
    nonzero = build.logical_not(b, b.Compare(remainder, zero, predicate="eq"))
    negative = b.Compare(remainder, zero, predicate="lt")
    signs_differ = build.compare(b, negative, b.Compare(d, zero, predicate="lt"), "ne")
    fix = b.Select(nonzero, signs_differ, b.splat(False, nonzero))
    return b.Select(fix, b.Add(remainder, d), remainder, name=ctx.name)


def _floor_divide(b: Builder, x: Node, divisor: Node) -> Node:
    """Integer floor division by a positive divisor (glow's Div truncates toward zero)."""
    quotient = b.Div(x, divisor)
    negative_rest = b.Compare(b.Sub(x, b.Mul(quotient, divisor)), b.splat(0, x), predicate="lt")
    return b.Select(negative_rest, b.Sub(quotient, b.splat(1, quotient)), quotient)


@importer("BitShift", fold="always")
def _bit_shift(ctx: NodeContext) -> Node:
    """x * 2^s (wrapping) or floor(x / 2^s), with 2^s gathered from a load-time table.

    Shifts outside [0, bits) give 0 to the left and the sign fill (-1 or 0) to the right,
    as ONNX (opset 28) defines for signed integers.
    """
    b = ctx.b
    x, shift = build.broadcast(b, ctx.node(0), ctx.node(1))
    if x.type.elem.is_float or x.type.elem is ElemKind.bool:
        raise ctx.refuse(f"BitShift needs integers, got {x.type}")
    bits = x.type.elem.itemsize * 8
    left = ctx.required_attr("direction") == "LEFT"
    signed = x.type.elem not in UNSIGNED_INT_KINDS
    # A signed right shift by bits - 1 is the sign fill itself; unsigned ones shift all the way.
    top = bits - 1 if left or not signed else bits - 2
    index = build.convert(b, b.Max(b.Min(shift, b.splat(top, shift)), b.splat(0, shift)), ElemKind.int64)
    table = np.array([1 << k for k in range(top + 1)], dtype=np.uint64).astype(x.type.dtype)
    power = b.Gather(build.constant(b, table, "powers"), index, axis=0)
    below_top = b.Compare(shift, b.splat(top + 1, shift), predicate="lt")
    if signed:
        not_negative = b.Compare(b.splat(-1, shift), shift, predicate="lt")
        in_range = b.Select(not_negative, below_top, b.splat(False, shift.type.with_elem(ElemKind.bool)))
    else:
        in_range = below_top
    if left:
        return b.Select(in_range, b.Mul(x, power), b.splat(0, x), name=ctx.name)
    if not signed:
        return b.Select(in_range, _floor_divide(b, x, power), b.splat(0, x), name=ctx.name)
    fill = b.Select(b.Compare(x, b.splat(0, x), predicate="lt"), b.splat(-1, x), b.splat(0, x))
    return b.Select(in_range, _floor_divide(b, x, power), fill, name=ctx.name)


_BITWISE = {"BitwiseAnd": "and", "BitwiseOr": "or", "BitwiseXor": "xor"}


@importer(*_BITWISE, "BitwiseNot", fold="always")
def _bitwise(ctx: NodeContext) -> Node:
    """Bitwise ops on integers; not(x) is x xor all-ones (-1, or the unsigned maximum)."""
    if ctx.op_type == "BitwiseNot":
        x = ctx.node(0)
        all_ones = int(np.iinfo(x.type.dtype).max) if x.type.elem in UNSIGNED_INT_KINDS else -1
        return ctx.b.Bitwise(x, ctx.b.splat(all_ones, x), op="xor", name=ctx.name)
    lhs, rhs = build.broadcast(ctx.b, ctx.node(0), ctx.node(1))
    return ctx.b.Bitwise(lhs, rhs, op=_BITWISE[ctx.op_type], name=ctx.name)


@importer("BitCast", fold="always")
def _bit_cast(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    try:
        kind = elem_kind_of(int(ctx.required_attr("to")), "the BitCast target")
    except UnsupportedOpError as err:
        raise ctx.refuse(str(err)) from None
    return ctx.b.BitCast(x, elem=kind.name, name=ctx.name)
