"""Normalization nodes beside LayerNorm and BatchNorm: RMSNorm, GroupNorm, InstanceNorm.

Statistics are kept-dim reductions (glow's ReduceSum keeps reduced dims with size 1)
broadcast back over the input. ``stash`` is the element kind the statistics are computed
in (ONNX's ``stash_type``): a half-precision input is converted to it and the result back.
The helpers are shared with the importers that still build statistics inline (training
BatchNorm, mean-variance normalization), so each formula exists once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from glow_core.errors import ShapeError
from glow_core.spec import Attr, In, ex, expect, node, normalize_axis
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type


def convert(b: Builder, x: Node, elem: ElemKind) -> Node:
    """``x`` in element kind ``elem`` (no node when it already is)."""
    return x if x.type.elem is elem else b.Convert(x, elem=elem.name)


def kept_mean(b: Builder, x: Node, axes: tuple[int, ...]) -> Node:
    """Mean over ``axes``, kept with size 1 (an empty slice gives 0/0 = NaN, as numpy)."""
    count = math.prod(x.type.shape[a] for a in axes)
    total = b.ReduceSum(x, axes=axes)
    return b.Mul(total, b.splat(1.0 / count if count else math.nan, total))


def normalized(b: Builder, x: Node, axes: tuple[int, ...], epsilon: float) -> tuple[Node, Node, Node]:
    """(x - mean) / sqrt(var + eps), with the mean and 1/sqrt(var + eps) (both kept-dim)."""
    shape = x.type.shape
    average = kept_mean(b, x, axes)
    centered = b.Sub(x, b.Broadcast(average, shape=shape))
    variance = kept_mean(b, b.Mul(centered, centered), axes)
    inv_std = b.Div(b.splat(1.0, variance), b.Sqrt(b.Add(variance, b.splat(epsilon, variance))))
    return b.Mul(centered, b.Broadcast(inv_std, shape=shape)), average, inv_std


def affine(b: Builder, y: Node, scale: Node | None, bias: Node | None) -> Node:
    """y * scale + bias, both broadcast numpy-style to y."""
    if scale is not None:
        y = b.mul(y, convert(b, scale, y.type.elem))
    if bias is not None:
        y = b.add(y, convert(b, bias, y.type.elem))
    return y


def per_channel(b: Builder, v: Node, rank: int) -> Node:
    """A [C] vector shaped [1, C, 1, ...] to broadcast over NC... tensors."""
    return b.reshape(v, (1, v.type.shape[0]) + (1,) * (rank - 2))


def stashed(b: Builder, x: Node, stash: str) -> Node:
    """``x`` in the statistics precision ``stash`` (only a float input to a float kind)."""
    kind = ElemKind.parse(stash)
    return convert(b, x, kind) if x.type.elem.is_float and kind.is_float else x


def _check_stash(stash: str, input: Type) -> None:
    known = [k.name for k in ElemKind]
    expect(stash in known, f"stash {stash!r} is not an element kind; known: {known}", input)


def _broadcast_shape(input: Type, scale: Type) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(input.shape, scale.shape))
    except ValueError:
        raise ShapeError(f"scale does not broadcast to the input: {scale} vs {input}") from None


def _check_float(input: Type) -> None:
    expect(input.elem.is_float, "the input must be a float tensor", input)


@node
class RMSNorm:
    """x / sqrt(mean(x^2) + epsilon) * scale over the dims from ``axis`` on (ONNX
    RMSNormalization); ``scale`` broadcasts numpy-style."""

    input = In()
    scale = In()
    axis = Attr(int, -1)
    epsilon = Attr(float, 1e-5)
    stash = Attr(str, "float32", "element kind the statistics are computed in")
    examples = (ex("f32[2,4,8]", "f32[8]"), ex("f32[2,3,4]", "f32[3,4]", axis=1))

    def type(input, scale, axis, epsilon, stash):
        _check_float(input)
        expect(input.rank >= 1, "the input must have rank >= 1", input)
        normalize_axis(axis, input.rank, input)
        _check_stash(stash, input)
        return input.with_shape(_broadcast_shape(input, scale))

    def lower(b, input, scale, axis, epsilon, stash):
        axes = tuple(range(normalize_axis(axis, input.type.rank), input.type.rank))
        work = stashed(b, input, stash)
        power = kept_mean(b, b.Mul(work, work), axes)
        root = b.Sqrt(b.Add(power, b.splat(epsilon, power)))
        y = b.Div(work, b.Broadcast(root, shape=work.type.shape))
        return affine(b, convert(b, y, input.type.elem), scale, None)


@node
class GroupNorm:
    """Normalize each of ``num_groups`` groups of channels (dim 1), then scale and shift:
    per channel ([C] parameters) or, as before ONNX opset 21, per group ([num_groups])."""

    input = In()
    scale = In()
    bias = In()
    num_groups = Attr(int)
    epsilon = Attr(float, 1e-5)
    stash = Attr(str, "float32", "element kind the statistics are computed in")
    examples = (
        ex("f32[2,6,4,4]", "f32[6]", "f32[6]", num_groups=3),
        ex("f32[2,6,5]", "f32[2]", "f32[2]", num_groups=2),
    )

    def type(input, scale, bias, num_groups, epsilon, stash):
        _check_float(input)
        expect(input.rank >= 2, "the input needs a channel dimension", input)
        _check_stash(stash, input)
        channels = input.shape[1]
        expect(num_groups >= 1, f"num_groups = {num_groups} must be at least 1", input)
        expect(
            channels % num_groups == 0,
            f"{channels} channels do not split into num_groups = {num_groups} groups",
            input,
        )
        expect(scale.rank == 1 and bias.rank == 1, "scale and bias must be 1-D", scale, bias)
        if scale.shape[0] == num_groups and num_groups != channels:
            expect(
                bias.shape == scale.shape, "per-group scale and bias must both be [num_groups]", scale, bias
            )
        else:
            for t in (scale, bias):
                expect(t.shape[0] in (1, channels), "scale and bias must be [C] or [num_groups]", t, input)
        return input

    def lower(b, input, scale, bias, num_groups, epsilon, stash):
        x = input
        n, c = x.type.shape[:2]
        grouped = b.reshape(stashed(b, x, stash), (n, num_groups, -1))
        y, _, _ = normalized(b, grouped, (2,), epsilon)
        if scale.type.shape[0] == num_groups and num_groups != c:
            shape = (1, num_groups, 1)
            y = affine(b, y, b.reshape(scale, shape), b.reshape(bias, shape))
            return b.reshape(convert(b, y, x.type.elem), x.type.shape)
        y = b.reshape(convert(b, y, x.type.elem), x.type.shape)
        rank = x.type.rank
        return affine(b, y, per_channel(b, scale, rank), per_channel(b, bias, rank))


@node
class InstanceNorm:
    """Normalize each channel of each sample over its spatial dims, then scale and shift per
    channel."""

    input = In()
    scale = In()
    bias = In()
    epsilon = Attr(float, 1e-5)
    examples = (ex("f32[2,3,4,5]", "f32[3]", "f32[3]"), ex("f32[2,3,6]", "f32[3]", "f32[3]"))

    def type(input, scale, bias, epsilon):
        _check_float(input)
        expect(input.rank >= 3, "the input needs a channel and a spatial dimension", input)
        for t in (scale, bias):
            expect(t.rank == 1 and t.shape[0] in (1, input.shape[1]), "scale and bias must be [C]", t, input)
        return input

    def lower(b, input, scale, bias, epsilon):
        rank = input.type.rank
        y, _, _ = normalized(b, input, tuple(range(2, rank)), epsilon)
        return affine(b, y, per_channel(b, scale, rank), per_channel(b, bias, rank))
