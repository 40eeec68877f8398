"""Gradient rules of the window primitives (Convolution, AvgPool, MaxPool), built from the
core primitives: Convolution, Pad, Slice, Reshape, Transpose, Select and friends.

They live beside ``window.py`` (whose declarations name them as their ``grad``) to keep that
module about forward semantics; every rule here is first-order only.

The shared step is the transposed convolution: spreading each output gradient back over the
input window it came from. It is a stride-1 convolution of the gradient, dilated by the
strides (zeros between elements) and padded so that every input position is reached, with
the filter flipped spatially and its channel axes swapped per group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node


def _dilate(b: Builder, x: Node, strides: tuple[int, int]) -> Node:
    """[N,C,H,W] -> [N,C,(H-1)*sh+1,(W-1)*sw+1] with sh-1 (sw-1) zero rows (columns) between
    elements: each element becomes a [sh, sw] block padded with zeros, then the tail is cut."""
    sh, sw = strides
    if (sh, sw) == (1, 1):
        return x
    n, c, h, w = x.type.shape
    blocks = b.Reshape(x, shape=(n, c, h, 1, w, 1))
    blocks = b.Pad(blocks, pads=(0, 0, 0, 0, 0, 0, 0, 0, 0, sh - 1, 0, sw - 1))
    spread = b.Reshape(blocks, shape=(n, c, h * sh, w * sw))
    return b.Slice(spread, starts=(0, 0, 0, 0), ends=(n, c, (h - 1) * sh + 1, (w - 1) * sw + 1))


def _pad_or_crop(b: Builder, x: Node, before: tuple[int, int], after: tuple[int, int]) -> Node:
    """Pad H and W by non-negative amounts and crop by the magnitude of negative ones."""
    grow = tuple(max(p, 0) for p in before), tuple(max(p, 0) for p in after)
    if any(grow[0]) or any(grow[1]):
        x = b.Pad(x, pads=(0, 0, *grow[0], 0, 0, *grow[1]))
    n, c, h, w = x.type.shape
    cut_before = tuple(max(-p, 0) for p in before)
    cut_after = tuple(max(-p, 0) for p in after)
    if any(cut_before) or any(cut_after):
        x = b.Slice(
            x,
            starts=(0, 0, cut_before[0], cut_before[1]),
            ends=(n, c, h - cut_after[0], w - cut_after[1]),
        )
    return x


def transposed_convolution(
    b: Builder,
    out_grad: Node,
    filter: Node,
    input_shape: tuple[int, ...],
    strides: tuple[int, int],
    pads: tuple[int, ...],
    dilations: tuple[int, int],
    group: int,
) -> Node:
    """The gradient with respect to the input of ``Convolution(input, filter, ...)``."""
    cout, cin_g, kh, kw = filter.type.shape
    span = (dilations[0] * (kh - 1) + 1, dilations[1] * (kw - 1) + 1)
    spread = _dilate(b, out_grad, strides)
    # Rows (columns) past the last window get no gradient: padded back as zeros at the end.
    height, width = input_shape[2], input_shape[3]
    tail = (
        height + pads[0] + pads[2] - spread.type.shape[2] - span[0] + 1,
        width + pads[1] + pads[3] - spread.type.shape[3] - span[1] + 1,
    )
    before = (span[0] - 1 - pads[0], span[1] - 1 - pads[1])
    after = (span[0] - 1 - pads[2] + tail[0], span[1] - 1 - pads[3] + tail[1])
    padded = _pad_or_crop(b, spread, before, after)
    # filter [Cout, Cin/g, kh, kw] -> [Cin, Cout/g, kh, kw], flipped in both spatial axes.
    grouped = b.Reshape(filter, shape=(group, cout // group, cin_g, kh, kw))
    swapped = b.Reshape(
        b.Transpose(grouped, shuffle=(0, 2, 1, 3, 4)), shape=(group * cin_g, cout // group, kh, kw)
    )
    flipped = b.Slice(
        swapped,
        starts=(0, 0, kh - 1, kw - 1),
        ends=(group * cin_g, cout // group, -1, -1),
        steps=(1, 1, -1, -1),
    )
    return b.Convolution(padded, flipped, dilations=dilations, group=group)


def filter_gradient(
    b: Builder,
    input: Node,
    out_grad: Node,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    pads: tuple[int, ...],
    dilations: tuple[int, int],
    group: int,
) -> Node:
    """The gradient with respect to the filter: one grouped convolution of the padded input
    by the output gradient, where the forward dilation becomes the stride and the forward
    stride the dilation.

    Per group k it correlates input channels of k (as the batch) with output channels of k
    (as filters), summing over the batch (as channels). All groups run as one convolution
    with ``group`` groups of N channels each, so a depthwise layer costs one node, not one
    per channel: the input is laid out [Cin/g, g*N, H, W] and the gradient [Cout, N, OH, OW].
    """
    n, cin, _, _ = input.type.shape
    cout = out_grad.type.shape[1]
    cin_g = cin // group
    padded = input
    if any(pads):
        padded = b.Pad(input, pads=(0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]))
    ph, pw = padded.type.shape[2:]
    by_group = b.Reshape(padded, shape=(n, group, cin_g, ph, pw))
    images = b.Reshape(b.Transpose(by_group, shuffle=(2, 1, 0, 3, 4)), shape=(cin_g, group * n, ph, pw))
    filters = b.Transpose(out_grad, shuffle=(1, 0, 2, 3))  # [Cout, N, OH, OW], groups in order
    correlation = b.Convolution(images, filters, strides=dilations, dilations=strides, group=group)
    # [Cin/g, Cout, >= kh, >= kw]: positions past the kernel are dropped.
    window = b.Slice(correlation, starts=(0, 0, 0, 0), ends=(cin_g, cout, kernel[0], kernel[1]))
    return b.Transpose(window, shuffle=(1, 0, 2, 3))


def convolution_grad(b: Builder, node: Node, out_grad: Node) -> tuple[Node, Node]:
    """Convolution's rule: (input gradient, filter gradient)."""
    attrs = (node.strides, node.pads, node.dilations, node.group)
    filter = node.filter
    return (
        transposed_convolution(b, out_grad, filter, node.input.type.shape, *attrs),
        filter_gradient(b, node.input, out_grad, filter.type.shape[2:], *attrs),
    )


def _divisors(
    input_shape: tuple[int, ...], out_shape: tuple[int, ...], kernel, strides, pads, count_include_pad: bool
) -> np.ndarray:
    """What AvgPool divides each window's sum by: [1, 1, OH, OW]."""
    from glow_core.primitives.window import AvgPool

    area = kernel[0] * kernel[1]
    if count_include_pad:
        return np.full((1, 1, *out_shape[2:]), float(area))
    ones = np.ones((1, 1, *input_shape[2:]))
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "count_include_pad": True}
    return AvgPool.evaluate([ones], attrs) * area  # the real (unpadded) elements per window


def avg_pool_grad(b: Builder, node: Node, out_grad: Node) -> tuple[Node]:
    """AvgPool's rule: each window's gradient, divided by its divisor, spread evenly over
    the window; that is a transposed depthwise convolution by a filter of ones."""
    channels = node.input.type.shape[1]
    dtype = out_grad.type.dtype
    divisors = _divisors(
        node.input.type.shape, node.type.shape, node.kernel, node.strides, node.pads, node.count_include_pad
    )
    scaled = b.Div(
        out_grad, b.broadcast_to(b.constant(divisors, name="pool_divisors", dtype=dtype), out_grad.type.shape)
    )
    ones = b.constant(np.ones((channels, 1, *node.kernel)), name="pool_window", dtype=dtype)
    return (
        transposed_convolution(
            b, scaled, ones, node.input.type.shape, node.strides, node.pads, (1, 1), channels
        ),
    )


def max_pool_grad(b: Builder, node: Node, out_grad: Node) -> tuple[Node]:
    """MaxPool's rule: each window's gradient goes to the elements equal to its maximum
    (every one of them on a tie). Built per kernel offset: the strided slice of the padded
    input at that offset is compared with the result, the selected gradient is spread back
    to those positions, and the offsets are summed."""
    x = node.input
    n, c = x.type.shape[:2]
    pads, (sh, sw), (kh, kw) = node.pads, node.strides, node.kernel
    oh, ow = node.type.shape[2:]
    padded = (
        x if not any(pads) else b.Pad(x, pads=(0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]), value=-np.inf)
    )
    ph, pw = padded.type.shape[2:]
    zero = b.splat(0.0, out_grad)
    total = None
    for i in range(kh):
        for j in range(kw):
            ends = (n, c, i + sh * (oh - 1) + 1, j + sw * (ow - 1) + 1)
            seen = b.Slice(padded, starts=(0, 0, i, j), ends=ends, steps=(1, 1, sh, sw))
            picked = b.Select(b.Compare(seen, node, predicate="eq"), out_grad, zero)
            spread = _dilate(b, picked, (sh, sw))
            back = _pad_or_crop(b, spread, (i, j), (ph - ends[2], pw - ends[3]))
            total = back if total is None else b.Add(total, back)
    return (_pad_or_crop(b, total, (-pads[0], -pads[1]), (-pads[2], -pads[3])),)
