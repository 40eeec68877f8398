"""Importers for convolution (NCHW), including 1-D forms and ONNX padding rules.

glow's window primitives are 2-D with explicit (top, left, bottom, right) pads and floor
output sizes. ONNX's auto_pad is turned into explicit pads here, and a 1-D
window op runs as a 2-D one over a height-1 image, which computes exactly the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.ops_pool import window_ints
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.node import Node
from glow_core.graph.nodes.convolution import conv3d

Pads = tuple[int, int, int, int]


def _as_2d(ctx: NodeContext, x: Node) -> tuple[Node, bool]:
    """``x`` as NCHW, and whether it was NCW (1-D) and must be reshaped back."""
    if x.type.rank == 4:
        return x, False
    if x.type.rank == 3:
        n, c, w = x.type.shape
        return ctx.b.Reshape(x, shape=(n, c, 1, w)), True
    raise ctx.refuse(
        f"only 1-D, 2-D and (for Conv and ConvTranspose) 3-D {ctx.op_type} is supported, input is {x.type}"
    )


def _spatial_attr(ctx: NodeContext, key: str, default: int, one_d: bool) -> tuple[int, int]:
    """A per-spatial-dim attribute (strides, dilations, kernel) in 2-D form."""
    values = window_ints(ctx, key, default, 1 if one_d else 2)
    return (1, values[0]) if one_d else (values[0], values[1])


def _pads(ctx: NodeContext, size: Sequence[int], window: tuple[Sequence[int], ...], one_d: bool) -> Pads:
    """Explicit (top, left, bottom, right) pads from ``pads`` or ``auto_pad``.

    ``window`` is (kernel, strides, dilations), all in 2-D form.
    """
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = window_ints(ctx, "pads", 0, 1 if one_d else 2)
        if one_d:
            return (0, pads[0], 0, pads[1])
        return (pads[0], pads[1], pads[2], pads[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.refuse(f"auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begin, end = [], []
    for d, k, s, dil in zip(size, *window, strict=True):
        total = max((math.ceil(d / s) - 1) * s + (k - 1) * dil + 1 - d, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


def _back_to_1d(ctx: NodeContext, y: Node, one_d: bool) -> Node:
    if not one_d:
        return y
    n, c, _, w = y.type.shape
    return ctx.b.Reshape(y, shape=(n, c, w), name=ctx.name)


CONV_RANKS = {0: Rank.at_least(3), 1: Rank.at_least(3)}
"""Input and weight of every convolution: [N, C, spatial...] and [M, C/group, kernel...]."""


@importer("Conv", ranks={**CONV_RANKS, 2: 1})
def _conv(ctx: NodeContext) -> Node:
    return conv_layer(ctx, ctx.node(0), ctx.node(1), ctx.optional_node(2))


def conv_layer(ctx: NodeContext, x: Node, w: Node, bias: Node | None) -> Node:
    """ONNX Conv of ``x`` by ``w`` (+ ``bias``) with the node's attributes: 1-D, 2-D or 3-D,
    explicit or automatic pads. Integer and quantized convolutions call it on their
    centered operands."""
    if x.type.rank == 5:
        if x is not ctx.node(0) or w is not ctx.node(1):
            raise ctx.refuse("3-D integer convolution is not supported")
        return _conv_3d(ctx)
    x, one_d = _as_2d(ctx, x)
    if one_d and w.type.rank == 3:
        w = ctx.b.reshape(w, (w.type.shape[0], w.type.shape[1], 1, w.type.shape[2]))
    if w.type.rank != 4:
        raise ShapeError(f"weight {w.type} does not match the input rank")
    group = ctx.int_attr("group", 1, low=1)
    kernel = ctx.attr("kernel_shape")
    if kernel is not None and tuple((1, *kernel) if one_d else kernel) != w.type.shape[2:]:
        raise ShapeError(f"kernel_shape {list(kernel)} differs from the weight's {list(w.type.shape[2:])}")
    strides = _spatial_attr(ctx, "strides", 1, one_d)
    dilations = _spatial_attr(ctx, "dilations", 1, one_d)
    pads = _pads(ctx, x.type.shape[2:], (w.type.shape[2:], strides, dilations), one_d)
    y = ctx.b.conv(
        x,
        w,
        bias,
        strides=strides,
        pads=pads,
        dilations=dilations,
        group=group,
        name=None if one_d else ctx.name,
    )
    return _back_to_1d(ctx, y, one_d)


def _conv_3d(ctx: NodeContext) -> Node:
    """3-D Conv: pads applied first (explicit or auto_pad), then ``conv3d``, then the bias."""
    x, w, b = ctx.node(0), ctx.node(1), ctx.b
    if w.type.rank != 5:
        raise ShapeError(f"weight {w.type} does not match the 3-D input {x.type}")
    kernel = w.type.shape[2:]
    strides, dilations = _ints3(ctx, "strides", 1), _ints3(ctx, "dilations", 1)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max((math.ceil(d / s) - 1) * s + (k - 1) * dl + 1 - d, 0)
            for d, k, s, dl in zip(x.type.shape[2:], kernel, strides, dilations, strict=True)
        ]
        small, large = [t // 2 for t in total], [t - t // 2 for t in total]
        begin, end = (small, large) if auto == "SAME_UPPER" else (large, small)
    elif auto == "VALID":
        begin, end = [0] * 3, [0] * 3
    elif auto == "NOTSET":
        pads = window_ints(ctx, "pads", 0, 3)
        begin, end = pads[:3], pads[3:]
    else:
        raise ctx.refuse(f"auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    if any(begin) or any(end):
        x = b.Pad(x, pads=(0, 0, *begin, 0, 0, *end))
    y = conv3d(b, x, w, strides=strides, dilations=dilations, group=ctx.int_attr("group", 1, low=1))
    if not ctx.has(2):
        return y
    return b.add(y, b.Reshape(ctx.node(2), shape=(1, y.type.shape[1], 1, 1, 1)), name=ctx.name)


def _transpose_pads(ctx: NodeContext, size: Sequence[int], window: tuple[Sequence[int], ...]) -> list[int]:
    """ConvTranspose pads (all begins, then all ends), derived from output_shape/auto_pad when given.

    ``window`` is (kernel, strides, dilations, output_padding), one entry per spatial dim.
    """
    kernel, strides, dilations, extra = window
    auto = ctx.attr("auto_pad", "NOTSET")
    target = ctx.attr("output_shape")
    if target is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        pads = window_ints(ctx, "pads", 0, len(size))
        if auto == "VALID":
            pads = [0] * (2 * len(size))
        return pads
    if target is None:
        target = [d * s for d, s in zip(size, strides, strict=True)]
    if len(target) not in (len(size), len(size) + 2):
        raise ctx.invalid(
            f"attribute 'output_shape' = {list(target)} must list the {len(size)} spatial dims "
            "(or the whole output shape)"
        )
    target = list(target)[-len(size) :]
    total = [
        s * (d - 1) + e + (k - 1) * dil + 1 - t
        for d, k, s, dil, e, t in zip(size, kernel, strides, dilations, extra, target, strict=True)
    ]
    if auto == "SAME_UPPER":
        return [t // 2 for t in total] + [t - t // 2 for t in total]
    return [t - t // 2 for t in total] + [t // 2 for t in total]


def _ints3(ctx: NodeContext, key: str, default: int) -> tuple[int, int, int]:
    values = window_ints(ctx, key, default, 3)
    return values[0], values[1], values[2]


@importer("ConvTranspose", ranks={**CONV_RANKS, 2: 1})
def _conv_transpose(ctx: NodeContext) -> Node:
    """One ConvTranspose node; auto_pad and output_shape become its explicit pads."""
    x = ctx.node(0)
    if x.type.rank not in (3, 4, 5):
        raise ctx.refuse(f"only 1-D, 2-D and 3-D ConvTranspose is supported, input is {x.type}")
    ctx.check_rank(1, x.type.rank)  # the filter has the input's rank
    d = x.type.rank - 2
    group = ctx.int_attr("group", 1, low=1)
    strides, dilations = window_ints(ctx, "strides", 1, d), window_ints(ctx, "dilations", 1, d)
    extra = window_ints(ctx, "output_padding", 0, d)
    kernel = ctx.shape(1)[2:]
    pads = _transpose_pads(ctx, x.type.shape[2:], (kernel, strides, dilations, extra))
    w = ctx.node(1)
    outputs = w.type.shape[1] * group
    bias = ctx.node(2) if ctx.has(2) else ctx.b.splat(0.0, w.type.with_shape((outputs,)))
    return ctx.b.ConvTranspose(
        x,
        w,
        bias,
        strides=tuple(strides),
        pads=tuple(pads),
        dilations=tuple(dilations),
        output_padding=tuple(extra),
        group=group,
        name=ctx.name,
    )


@importer("CausalConvWithState", ranks={0: 3, 1: 3, 2: 1, 3: 3})
def _causal_conv_with_state(ctx: NodeContext) -> list[Node]:
    """Depthwise causal conv1d over [past_state (or zeros), input]; the state is the last k - 1 steps."""
    x, w, b = ctx.node(0), ctx.node(1), ctx.b
    batch, channels, length = x.type.shape
    k = w.type.shape[2]
    past = ctx.node(3) if ctx.has(3) else b.splat(0.0, x.type.with_shape((batch, channels, k - 1)))
    padded = b.Concat(past, x, axis=2) if k > 1 else x
    total = padded.type.shape[2]
    image = b.Reshape(padded, shape=(batch, channels, 1, total))
    y = b.conv(image, b.Reshape(w, shape=(channels, 1, 1, k)), ctx.optional_node(2), group=channels)
    y = b.Reshape(y, shape=(batch, channels, length))
    activation = ctx.attr("activation", "none")
    if activation in ("silu", "swish"):
        y = b.Mul(y, b.Sigmoid(y))
    elif activation != "none":
        raise ctx.refuse(f"activation {activation!r} is not one of none, silu, swish")
    state = b.Slice(padded, starts=(0, 0, total - (k - 1)), ends=(batch, channels, total))
    return [y, state]
