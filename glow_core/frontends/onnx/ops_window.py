"""Importers for convolution and pooling (NCHW), including 1-D forms and ONNX padding rules.

glow's window primitives are 2-D with explicit (top, left, bottom, right) pads and floor
output sizes. ONNX's auto_pad and ceil_mode are turned into explicit pads here, and a 1-D
window op runs as a 2-D one over a height-1 image, which computes exactly the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.ops_pool import pool, window_ints
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node

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


def _ceil_extra(
    size: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads: Pads
) -> tuple[int, int]:
    """Extra end padding so glow's floor output size equals ONNX's ceil_mode size.

    As onnxruntime (and PyTorch) do, a last window that would start past the input and
    its leading pad is dropped, so every window still covers a real element or a pad.
    """
    extra = []
    for axis, (d, k, s) in enumerate(zip(size, kernel, strides, strict=True)):
        begin, end = pads[axis], pads[axis + 2]
        out = math.ceil((d + begin + end - k) / s) + 1
        if (out - 1) * s >= d + begin:
            out -= 1
        extra.append(max((out - 1) * s + k - (d + begin + end), 0))
    return extra[0], extra[1]


@importer("MaxPool", "AveragePool", ranks={0: Rank.at_least(3)})
def _pool(ctx: NodeContext) -> Node | list[Node]:
    """Max/average pooling; average pads count per ``count_include_pad`` as onnxruntime does.

    3-D windows, dilations and MaxPool's Indices output take the window-gather path (ops_pool).
    """
    rank = ctx.node(0).type.rank
    dilated = any(int(d) != 1 for d in ctx.attr("dilations", []))
    if rank not in (3, 4) or dilated or ctx.output_requested(1):
        return pool(ctx)
    x, one_d = _as_2d(ctx, ctx.node(0))
    if ctx.attr("kernel_shape") is None:
        raise ctx.refuse("kernel_shape attribute is required")
    kernel = _spatial_attr(ctx, "kernel_shape", 1, one_d)
    strides = _spatial_attr(ctx, "strides", 1, one_d)
    if _spatial_attr(ctx, "dilations", 1, one_d) != (1, 1):
        raise ctx.refuse(f"dilations {ctx.attr('dilations')} are not supported for pooling (only 1)")
    pads = _pads(ctx, x.type.shape[2:], (kernel, strides, (1, 1)), one_d)
    extra = _ceil_extra(x.type.shape[2:], kernel, strides, pads) if ctx.attr("ceil_mode", 0) else (0, 0)
    padded = (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])
    name = None if one_d else ctx.name
    if ctx.op_type == "MaxPool":
        y = ctx.b.MaxPool(x, kernel=kernel, strides=strides, pads=padded, name=name)
    elif not ctx.attr("count_include_pad", 0):
        y = ctx.b.AvgPool(x, kernel=kernel, strides=strides, pads=padded, name=name)
    elif extra == (0, 0):
        y = ctx.b.AvgPool(x, kernel=kernel, strides=strides, pads=pads, count_include_pad=True, name=name)
    else:
        # Declared pads count in the divisor, the ceil overhang does not: pad with real
        # zeros first, then pool excluding only the overhang.
        zeros = ctx.b.Pad(x, pads=(0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]))
        y = ctx.b.AvgPool(zeros, kernel=kernel, strides=strides, pads=(0, 0, *extra), name=name)
    return _back_to_1d(ctx, y, one_d)


@importer("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeContext) -> Node:
    """Reduce over every spatial dim, keeping them as size 1 (as ONNX does)."""
    x = ctx.node(0)
    if x.type.rank < 3:
        raise ShapeError(f"input {x.type} has no spatial dims")
    kind = "ReduceMean" if ctx.op_type == "GlobalAveragePool" else "ReduceMax"
    return ctx.b.create(kind, x, axes=tuple(range(2, x.type.rank)), name=ctx.name)


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


def _flipped_filter(ctx: NodeContext, group: int) -> Node:
    """ConvTranspose's [C, M/g, *k] filter as the equivalent Convolution filter [M, C/g, *k]:
    output and input channels swapped per group, every spatial axis reversed (a 1-D filter
    gets a height-1 axis first)."""
    ctx.check_rank(1, ctx.node(0).type.rank)  # the filter has the input's rank
    channels = ctx.shape(1)[0]
    if channels % group or ctx.shape(0)[1] != channels:
        raise ShapeError(
            f"filter {list(ctx.shape(1))} must have the input's {ctx.shape(0)[1]} channels first, "
            f"a multiple of group = {group}"
        )
    if ctx.is_static(1):
        w = ctx.static(1, "weights")
        if w.ndim == 3:
            w = w[:, :, None, :]
        c, m_g, *k = w.shape
        swapped = w.reshape(group, c // group, m_g, *k).swapaxes(1, 2).reshape(group * m_g, c // group, *k)
        flipped = swapped[(slice(None), slice(None), *([slice(None, None, -1)] * len(k)))]
        return ctx.constant(np.ascontiguousarray(flipped), "filter")
    w, b = ctx.node(1), ctx.b
    if w.type.rank == 3:
        w = b.Reshape(w, shape=(w.type.shape[0], w.type.shape[1], 1, w.type.shape[2]))
    c, m_g, *k = w.type.shape
    grouped = b.Reshape(w, shape=(group, c // group, m_g, *k))
    perm = (0, 2, 1, *range(3, 3 + len(k)))
    swapped = b.Reshape(b.Transpose(grouped, shuffle=perm), shape=(group * m_g, c // group, *k))
    return b.Slice(
        swapped,
        starts=(0, 0, *(d - 1 for d in k)),
        ends=(group * m_g, c // group, *([-1] * len(k))),
        steps=(1, 1, *([-1] * len(k))),
    )


def _spread(b: Builder, x: Node, strides: Sequence[int]) -> Node:
    """Insert stride - 1 zeros between neighbouring elements of every spatial axis (the
    transposed convolution's input grid)."""
    if all(s == 1 for s in strides):
        return x
    n, c, *size = x.type.shape
    cells = b.Reshape(x, shape=(n, c, *(v for d in size for v in (d, 1))))
    ends = (0, 0, *(v for s in strides for v in (0, s - 1)))
    grid = b.Reshape(
        b.Pad(cells, pads=(0,) * len(ends) + ends),
        shape=(n, c, *(d * s for d, s in zip(size, strides, strict=True))),
    )
    spread = tuple((d - 1) * s + 1 for d, s in zip(size, strides, strict=True))
    return b.Slice(grid, starts=(0,) * (2 + len(size)), ends=(n, c, *spread))


def _pad_or_crop(b: Builder, x: Node, begin: Sequence[int], end: Sequence[int]) -> Node:
    """Pad the spatial axes by ``begin``/``end``; negative amounts crop."""
    grow = (0, 0, *(max(v, 0) for v in begin), 0, 0, *(max(v, 0) for v in end))
    if any(grow):
        x = b.Pad(x, pads=grow)
    n, c, *size = x.type.shape
    lead, tail = [max(-v, 0) for v in begin], [max(-v, 0) for v in end]
    if any(lead) or any(tail):
        stops = (d - t for d, t in zip(size, tail, strict=True))
        x = b.Slice(x, starts=(0, 0, *lead), ends=(n, c, *stops))
    return x


def _transposed_grid(
    ctx: NodeContext, x: Node, kernel: Sequence[int], window: tuple[Sequence[int], ...]
) -> Node:
    """The zero-spread, padded (or cropped) input whose stride-1 convolution with the flipped
    filter is the transposed convolution; ``window`` is (strides, dilations, pads, output_padding),
    pads as all begins then all ends."""
    strides, dilations, pads, extra = window
    d = len(kernel)
    reach = [(k - 1) * dl for k, dl in zip(kernel, dilations, strict=True)]
    begin = [r - p for r, p in zip(reach, pads[:d], strict=True)]
    end = [r - p + e for r, p, e in zip(reach, pads[d:], extra, strict=True)]
    return _pad_or_crop(ctx.b, _spread(ctx.b, x, strides), begin, end)


@importer("ConvTranspose", ranks={**CONV_RANKS, 2: 1})
def _conv_transpose(ctx: NodeContext) -> Node:
    """A stride-1 Convolution of the zero-spread input with the flipped, channel-swapped filter."""
    if ctx.node(0).type.rank == 5:
        return _conv_transpose_3d(ctx)
    x, one_d = _as_2d(ctx, ctx.node(0))
    group = ctx.int_attr("group", 1, low=1)
    w = _flipped_filter(ctx, group)
    strides = _spatial_attr(ctx, "strides", 1, one_d)
    dilations = _spatial_attr(ctx, "dilations", 1, one_d)
    extra = _spatial_attr(ctx, "output_padding", 0, one_d)
    extra = (0, extra[1]) if one_d else extra  # the dummy height dim gets no output padding
    kernel = w.type.shape[2:]
    spatial = 1 if one_d else 2
    given = ctx.shape(0)[2:]
    raw = _transpose_pads(
        ctx, given, (kernel[-spatial:], strides[-spatial:], dilations[-spatial:], extra[-spatial:])
    )
    pads = [0, raw[0], 0, raw[1]] if one_d else raw
    grid = _transposed_grid(ctx, x, kernel, (strides, dilations, pads, extra))
    y = ctx.b.conv(
        grid, w, ctx.optional_node(2), dilations=dilations, group=group, name=None if one_d else ctx.name
    )
    return _back_to_1d(ctx, y, one_d)


def _ints3(ctx: NodeContext, key: str, default: int) -> tuple[int, int, int]:
    values = window_ints(ctx, key, default, 3)
    return values[0], values[1], values[2]


def _conv_transpose_3d(ctx: NodeContext) -> Node:
    """3-D ConvTranspose: the same zero-spread grid, convolved by ``conv3d``."""
    x = ctx.node(0)
    group = ctx.int_attr("group", 1, low=1)
    w = _flipped_filter(ctx, group)
    if w.type.rank != 5:
        raise ShapeError(f"weight {w.type} does not match the 3-D input {x.type}")
    strides, dilations = _ints3(ctx, "strides", 1), _ints3(ctx, "dilations", 1)
    extra = _ints3(ctx, "output_padding", 0)
    kernel = w.type.shape[2:]
    pads = _transpose_pads(ctx, x.type.shape[2:], (kernel, strides, dilations, extra))
    grid = _transposed_grid(ctx, x, kernel, (strides, dilations, pads, extra))
    y = conv3d(ctx.b, grid, w, dilations=dilations, group=group)
    if not ctx.has(2):
        return y
    bias = ctx.b.Reshape(ctx.node(2), shape=(1, y.type.shape[1], 1, 1, 1))
    return ctx.b.add(y, bias, name=ctx.name)


def conv3d(
    b: Builder,
    x: Node,
    w: Node,
    *,
    strides: Sequence[int] = (1, 1, 1),
    dilations: Sequence[int] = (1, 1, 1),
    group: int = 1,
) -> Node:
    """An unpadded 3-D convolution ([N, C, D, H, W] by [M, C/g, kd, kh, kw]) as one 2-D
    convolution: the kd depth taps of every output depth become input channels.

    Output depth o reads input depths o * sd + k * dd; those kd slices are stacked next to the
    channels, ordered (group, tap, channel) so a grouped 2-D Convolution over [N * Do, kd * C,
    H, W] with the filter reordered to [M, kd * C/g, kh, kw] sums exactly the 3-D products.
    """
    n, c, depth, h, wd = x.type.shape
    m, c_g, kd, kh, kw = w.type.shape
    sd, dd = strides[0], dilations[0]
    out_depth = (depth - (kd - 1) * dd - 1) // sd + 1
    if out_depth < 1:
        raise ShapeError(f"depth kernel {kd} (dilation {dd}) is deeper than the input {x.type}")
    by_depth = b.Transpose(x, shuffle=(0, 2, 1, 3, 4))  # [N, D, C, H, W]
    taps = [
        b.Reshape(
            b.Slice(
                by_depth,
                starts=(0, k * dd, 0, 0, 0),
                ends=(n, k * dd + (out_depth - 1) * sd + 1, c, h, wd),
                steps=(1, sd, 1, 1, 1),
            ),
            shape=(n, out_depth, 1, group, c // group, h, wd),
        )
        for k in range(kd)
    ]
    stacked = b.Concat(*taps, axis=2) if kd > 1 else taps[0]  # [N, Do, kd, g, C/g, H, W]
    ordered = b.Transpose(stacked, shuffle=(0, 1, 3, 2, 4, 5, 6))
    images = b.Reshape(ordered, shape=(n * out_depth, kd * c, h, wd))
    filters = b.Reshape(b.Transpose(w, shuffle=(0, 2, 1, 3, 4)), shape=(m, kd * c_g, kh, kw))
    y = b.conv(
        images, filters, strides=strides[1:], dilations=dilations[1:], group=group
    )  # [N*Do, M, Ho, Wo]
    _, _, ho, wo = y.type.shape
    return b.Transpose(b.Reshape(y, shape=(n, out_depth, m, ho, wo)), shuffle=(0, 2, 1, 3, 4))


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
