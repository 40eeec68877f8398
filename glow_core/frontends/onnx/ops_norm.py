"""Importers for normalizations: layer, RMS, group, instance, Lp, mean-variance, LRN.

Statistics are kept-dim reductions (glow's ReduceSum/ReduceMax keep reduced dims with
size 1) broadcast back over the input. ``stash_type`` (the precision ONNX computes the
statistics in) is honoured by converting half-precision inputs to float32 and back.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.node import Node
from glow_core.graph.nodes.normalization import affine, kept_mean, normalized, per_channel
from glow_core.types import ElemKind


def _stash(ctx: NodeContext, x: Node) -> Node:
    """``x`` in the statistics precision (stash_type, float32 by default)."""
    stash = ctx.elem_attr("stash_type", 1)
    return build.convert(ctx.b, x, stash) if x.type.elem.is_float and stash.is_float else x


@importer("LayerNormalization", ranks={0: Rank.at_least(1)})
def _layer_norm(ctx: NodeContext) -> list[Node]:
    """One LayerNorm node for the plain case; explicit statistics when Mean/InvStdDev are used."""
    x, scale, bias = ctx.node(0), ctx.node(1), ctx.optional_node(2)
    axis = ctx.axis_attr("axis", -1, x.type.rank)
    epsilon, b = float(ctx.attr("epsilon", 1e-5)), ctx.b
    tail = x.type.shape[axis:]
    fused = x.type.elem is ElemKind.float32 and scale.type.shape == tail
    if (
        fused
        and (bias is None or bias.type.shape == tail)
        and not ctx.output_requested(1)
        and not ctx.output_requested(2)
    ):
        if bias is None:
            bias = ctx.constant(np.zeros(tail, x.type.dtype), "zero_bias")
        return [b.LayerNorm(x, scale, bias, axis=axis, epsilon=epsilon, name=ctx.name)]
    work = _stash(ctx, x)
    y, mean, inv_std = normalized(b, work, tuple(range(axis, x.type.rank)), epsilon)
    y = affine(b, build.convert(b, y, x.type.elem), scale, bias)
    return [y, mean, inv_std]


def _stash_name(ctx: NodeContext) -> str:
    """The RMS/GroupNorm ``stash`` attribute: ONNX's stash_type as an element kind name."""
    return ctx.elem_attr("stash_type", 1).name


@importer("RMSNormalization", ranks={0: Rank.at_least(1)})
def _rms_norm(ctx: NodeContext) -> Node:
    """One RMSNorm node: x / sqrt(mean(x^2) + eps) * scale over the dims from ``axis`` on."""
    x = ctx.node(0)
    axis = ctx.axis_attr("axis", -1, x.type.rank)
    epsilon = float(ctx.attr("epsilon", 1e-5))
    return ctx.b.RMSNorm(x, ctx.node(1), axis=axis, epsilon=epsilon, stash=_stash_name(ctx), name=ctx.name)


@importer("GroupNormalization", ranks={0: Rank.at_least(2), 1: 1, 2: 1})
def _group_norm(ctx: NodeContext) -> Node:
    """One GroupNorm node; scale/bias are per group before opset 21, per channel since."""
    groups = ctx.int_attr("num_groups", 0, low=1)
    epsilon, stash = float(ctx.attr("epsilon", 1e-5)), _stash_name(ctx)
    operands = (ctx.node(0), ctx.node(1), ctx.node(2))
    return ctx.b.GroupNorm(*operands, num_groups=groups, epsilon=epsilon, stash=stash, name=ctx.name)


@importer("InstanceNormalization", ranks={0: Rank.at_least(3), 1: 1, 2: 1})
def _instance_norm(ctx: NodeContext) -> Node:
    """One InstanceNorm node."""
    operands = (ctx.node(0), ctx.node(1), ctx.node(2))
    return ctx.b.InstanceNorm(*operands, epsilon=float(ctx.attr("epsilon", 1e-5)), name=ctx.name)


@importer("LpNormalization", ranks={0: Rank.at_least(1)})
def _lp_norm(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    axis = ctx.axis_attr("axis", -1, x.type.rank)
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = b.ReduceSum(build.absolute(b, x), axes=(axis,))
    elif p == 2:
        norm = b.Sqrt(b.ReduceSum(b.Mul(x, x), axes=(axis,)))
    else:
        raise ctx.refuse(f"p={p} is not 1 or 2")
    # A zero norm (an all-zero slice) gives zeros, as onnx.reference does, not NaN.
    safe = b.Select(b.Compare(norm, b.splat(0.0, norm), predicate="eq"), b.splat(1.0, norm), norm)
    return b.Div(x, b.Broadcast(safe, shape=x.type.shape), name=ctx.name)


@importer("MeanVarianceNormalization")
def _mvn(ctx: NodeContext) -> Node:
    """(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9), as the ONNX function body defines it."""
    x, b = ctx.node(0), ctx.b
    given = ctx.attr("axes", [0, 2, 3])
    axes = tuple(sorted({ctx.axis(int(a), x.type.rank, f"attribute 'axes' = {given}: axis") for a in given}))
    shape = x.type.shape
    mean = kept_mean(b, x, axes)
    variance = b.Sub(kept_mean(b, b.Mul(x, x), axes), b.Mul(mean, mean))
    std = b.Add(b.Sqrt(variance), b.splat(1e-9, variance))
    return b.Div(b.Sub(x, b.Broadcast(mean, shape=shape)), b.Broadcast(std, shape=shape), name=ctx.name)


@importer("LRN", ranks={0: Rank.at_least(2)})
def _lrn(ctx: NodeContext) -> Node:
    """x / (bias + alpha / size * window sum of x^2 over channels)^beta; the sum is a band MatMul."""
    x, b = ctx.node(0), ctx.b
    size = ctx.int_attr("size", 0, low=1)
    alpha, beta = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75))
    c = x.type.shape[1]
    low, high = (size - 1) // 2, math.ceil((size - 1) / 2)
    rows, cols = np.indices((c, c))
    band = ((rows - cols <= low) & (cols - rows <= high)).astype(x.type.dtype)  # [source c', target c]
    moved, inverse = build.move_axis_last(b, b.Mul(x, x), 1)
    summed = b.reshape(b.MatMul(b.reshape(moved, (-1, c)), build.constant(b, band, "band")), moved.type.shape)
    summed = summed if inverse is None else b.Transpose(summed, shuffle=inverse)
    base = b.Add(b.Mul(summed, b.splat(alpha / size, summed)), b.splat(float(ctx.attr("bias", 1.0)), summed))
    return b.Div(x, b.Pow(base, b.splat(beta, base)), name=ctx.name)


@importer("BatchNormalization", ranks={0: Rank.at_least(2), 1: 1, 2: 1, 3: 1, 4: 1})
def _batch_norm(ctx: NodeContext) -> list[Node]:
    """Inference: one BatchNorm node. training_mode=1: batch statistics, plus the running ones."""
    if ctx.opset < 9 and ctx.attr("spatial", 1) != 1:
        raise ctx.refuse("spatial=0 (per-activation statistics) is not supported")
    operands = [ctx.node(i) for i in range(5)]
    epsilon = float(ctx.attr("epsilon", 1e-5))
    if not ctx.attr("training_mode", 0):
        return [ctx.b.BatchNorm(*operands, epsilon=epsilon, name=ctx.name)]
    x, scale, bias, mean, var = operands
    b, rank = ctx.b, x.type.rank
    axes = (0, *range(2, rank))
    y, batch_mean, _ = normalized(b, x, axes, epsilon)
    y = affine(b, y, per_channel(b, scale, rank), per_channel(b, bias, rank))
    centered = b.Sub(x, b.Broadcast(batch_mean, shape=x.type.shape))
    batch_var = kept_mean(b, b.Mul(centered, centered), axes)  # the population variance, as ONNX
    momentum = float(ctx.attr("momentum", 0.9))
    channels = (x.type.shape[1],)

    def running(old: Node, current: Node) -> Node:
        fresh = b.Mul(b.Reshape(current, shape=channels), b.splat(1.0 - momentum, old))
        return b.Add(b.Mul(old, b.splat(momentum, old)), fresh)

    return [y, running(mean, batch_mean), running(var, batch_var)]
