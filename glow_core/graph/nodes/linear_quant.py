"""Linear quantization arithmetic shared by node lowerings and the ONNX importers.

Dequantize is ``(q - zero_point) * scale`` in the scale's float kind; quantize is
``clip(round_half_even(x / scale) + zero_point)`` in the integer target. Scales and zero
points are per tensor, per axis or per block, broadcast to the data first (``spread``).

These live in the graph layer, beside the node declarations whose lowerings use them
(QuantizeLinear, DequantizeLinear, the integer layers): lowering runs a node's own
``lower``, and the graph layer imports neither the frontends nor the lowering driver.
The ONNX importers build on the same functions and add what only they need, the narrow
kinds (float8, float4, int4, int2): they pass their narrow-aware ``cast`` in.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from glow_core.errors import ShapeError
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.spec import normalize_axis
from glow_core.types import ElemKind

Cast = Callable[[Builder, Node, ElemKind], Node]
"""Converts a value to an element kind: ``convert`` for the wide kinds; the importer passes
one that also decodes and encodes the narrow kinds."""


def convert(b: Builder, x: Node, elem: ElemKind, name: str | None = None) -> Node:
    """``x`` in element kind ``elem`` (no node when it already is)."""
    if x.type.elem is elem:
        return x
    return b.Convert(x, elem=elem.name, name=name)


def round_half_even(b: Builder, x: Node, name: str | None = None) -> Node:
    """Round to nearest, ties to even (ONNX Round, QuantizeLinear), from Floor alone."""
    low = b.Floor(x)
    frac = b.Sub(x, low)
    half = b.splat(0.5, x)
    odd = b.Compare(b.Sub(low, b.Mul(b.Floor(b.Mul(low, half)), b.splat(2.0, x))), b.splat(1.0, x))
    tie_up = b.Select(b.Compare(frac, half, predicate="eq"), odd, b.splat(False, odd))
    up = b.Select(b.Compare(half, frac, predicate="lt"), b.splat(True, odd), tie_up)
    rounded = b.Select(up, b.Add(low, b.splat(1.0, x)), low)
    # A zero result keeps x's sign (round(-0.3) is -0.0, and 1 / -0.0 is -inf): x * 0.
    signed_zero = b.Mul(x, b.splat(0.0, x))
    return b.Select(b.Compare(rounded, b.splat(0.0, x), predicate="eq"), signed_zero, rounded, name=name)


def spread(b: Builder, param: Node, like: Node, axis: int, block: int) -> Node:
    """A scale or zero point broadcast to ``like``: scalar, per axis, or per block along axis."""
    if param.type.size == 1:
        return b.broadcast_to(b.reshape(param, ()), like.type.shape)
    rank = like.type.rank
    if rank == 0:
        raise ShapeError(f"a scale or zero point of {param.type} cannot apply to the scalar {like.type}")
    axis = normalize_axis(axis, rank)
    if param.type.rank == 1 and not block:  # per axis
        shaped = b.reshape(param, [-1 if i == axis else 1 for i in range(rank)])
        return b.broadcast_to(shaped, like.type.shape)
    # Blocked: param has like's shape but for ceil(dim / block) along the axis.
    shape = param.type.shape
    if block < 1 or param.type.rank != rank:
        raise ShapeError(
            f"a scale or zero point of {param.type} fits {like.type} neither per tensor, per axis {axis} "
            f"nor in blocks (block_size {block}, the input's rank)"
        )
    blocks = shape[axis]
    spread = shape[: axis + 1] + (block,) + shape[axis + 1 :]
    expanded = b.Broadcast(b.Reshape(param, shape=shape[: axis + 1] + (1,) + shape[axis + 1 :]), shape=spread)
    merged = b.Reshape(expanded, shape=shape[:axis] + (blocks * block,) + shape[axis + 1 :])
    if blocks * block == like.type.shape[axis]:
        return merged
    ends = tuple(like.type.shape[axis] if i == axis else d for i, d in enumerate(merged.type.shape))
    return b.Slice(merged, starts=(0,) * rank, ends=ends)


def dequantize(
    b: Builder, q: Node, scale: Node, zero: Node | None, axis: int, block: int, cast: Cast = convert
) -> Node:
    """(q - zero_point) * scale, in the scale's float kind."""
    kind = scale.type.elem
    x = cast(b, q, kind)
    if zero is not None:
        x = b.Sub(x, spread(b, cast(b, zero, kind), x, axis, block))
    return b.Mul(x, spread(b, scale, x, axis, block))


def scale_and_shift(
    b: Builder,
    x: Node,
    scale: Node,
    zero: Node | None,
    axis: int,
    block: int,
    *,
    rounded: bool,
    cast: Cast = convert,
) -> Node:
    """x / scale (rounded half to even when ``rounded``) + zero_point, in x's kind: a
    quantization before its saturation and store."""
    q = b.Div(x, spread(b, convert(b, scale, x.type.elem), x, axis, block))
    if rounded:
        q = round_half_even(b, q)
    if zero is not None:
        q = b.Add(q, spread(b, cast(b, zero, x.type.elem), q, axis, block))
    return q


def quantize(
    b: Builder,
    x: Node,
    scale: Node,
    zero: Node | None,
    target: ElemKind,
    axis: int,
    block: int,
    bounds: tuple[int, int] | None = None,
    cast: Cast = convert,
) -> Node:
    """clamp(round(x / scale) + zero_point) in integer ``target`` (round half to even, as
    ONNX). ``bounds`` default to ``target``'s range."""
    low, high = (
        bounds if bounds is not None else (int(np.iinfo(target.dtype).min), int(np.iinfo(target.dtype).max))
    )
    q = scale_and_shift(b, x, scale, zero, axis, block, rounded=True, cast=cast)
    return cast(b, b.Clip(q, low=float(low), high=float(high)), target)
