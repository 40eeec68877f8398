"""ConvTranspose (1-D, 2-D and 3-D), and ``conv3d``, the 3-D convolution as one 2-D Conv.

A transposed convolution is a stride-1 convolution of the input spread out by the strides
(stride - 1 zeros between neighbours), padded by the filter's reach less ``pads`` (negative
amounts crop), with the filter flipped along every spatial axis and its input and output
channels swapped per group. The node keeps ONNX's operands ([C, M/group, *kernel] filter)
and explicit pads; the importer resolves ``auto_pad`` and ``output_shape`` into them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from glow_core.errors import ShapeError
from glow_core.graph.nodes.known import filled_with
from glow_core.spec import Attr, In, ex, expect, node

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type


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


# ---- ConvTranspose ------------------------------------------------------------------------


def transposed_size(size: int, kernel: int, window: tuple[int, int, int, int, int]) -> int:
    """One output dim: stride (size - 1) + output_padding + dilation (kernel - 1) + 1 - pads;
    ``window`` is (stride, dilation, pad begin, pad end, output_padding)."""
    stride, dilation, begin, end, extra = window
    return stride * (size - 1) + extra + dilation * (kernel - 1) + 1 - begin - end


def _conv_transpose_type(
    input: Type, filter: Type, bias: Type, attrs: tuple[tuple[int, ...], ...], group: int
) -> Type:
    strides, pads, dilations, output_padding = attrs
    expect(input.elem.is_float, "the input must be a float tensor", input)
    expect(3 <= input.rank <= 5, "the input must be [N, C, W], [N, C, H, W] or [N, C, D, H, W]", input)
    expect(filter.rank == input.rank, "the filter must have the input's rank", filter, input)
    expect(filter.elem == input.elem and bias.elem == input.elem, "operands must share a kind", filter, bias)
    d = input.rank - 2
    named = {"strides": strides, "dilations": dilations, "output_padding": output_padding}
    for name, values in named.items():
        expect(len(values) == d, f"{name} {list(values)} must give one value per spatial dim ({d})", input)
    expect(len(pads) == 2 * d, f"pads {list(pads)} must give all {d} begins, then all ends", input)
    expect(min(strides) >= 1 and min(dilations) >= 1, "strides and dilations must be >= 1", input)
    expect(min(output_padding) >= 0, "output_padding must not be negative", input)
    channels = input.shape[1]
    expect(
        group >= 1 and channels % group == 0, f"{channels} channels do not split into {group} groups", input
    )
    expect(filter.shape[0] == channels, "the filter must be [C, M/group, *kernel]", filter, input)
    outputs = filter.shape[1] * group
    expect(bias.shape == (outputs,), f"bias must be [{outputs}] (M = filter dim 1 * group)", bias, filter)
    spatial = tuple(
        transposed_size(n, k, (s, dl, pads[i], pads[d + i], e))
        for i, (n, k, s, dl, e) in enumerate(
            zip(input.shape[2:], filter.shape[2:], strides, dilations, output_padding, strict=True)
        )
    )
    expect(min(spatial) >= 1, f"the output's spatial dims {list(spatial)} must be positive", input, filter)
    return input.with_shape((input.shape[0], outputs, *spatial))


def _flipped_filter(b: Builder, w: Node, group: int) -> Node:
    """ConvTranspose's [C, M/g, *k] filter as the equivalent Convolution filter [M, C/g, *k]:
    output and input channels swapped per group, every spatial axis reversed (folded at
    compile time for constant weights)."""
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


def _transposed_grid(b: Builder, x: Node, kernel: Sequence[int], window: tuple[Sequence[int], ...]) -> Node:
    """The zero-spread, padded (or cropped) input whose stride-1 convolution with the flipped
    filter is the transposed convolution; ``window`` is (strides, dilations, pads,
    output_padding), pads as all begins then all ends."""
    strides, dilations, pads, extra = window
    d = len(kernel)
    reach = [(k - 1) * dl for k, dl in zip(kernel, dilations, strict=True)]
    begin = [r - p for r, p in zip(reach, pads[:d], strict=True)]
    end = [r - p + e for r, p, e in zip(reach, pads[d:], extra, strict=True)]
    return _pad_or_crop(b, _spread(b, x, strides), begin, end)


def _lower_conv_transpose(b: Builder, x: Node, w: Node, bias: Node, attrs: tuple, group: int) -> Node:
    strides, pads, dilations, extra = attrs
    if x.type.rank == 5:
        flipped = _flipped_filter(b, w, group)
        grid = _transposed_grid(b, x, flipped.type.shape[2:], (strides, dilations, pads, extra))
        y = conv3d(b, grid, flipped, dilations=dilations, group=group)
        if filled_with(bias, 0.0):
            return y
        return b.add(y, b.Reshape(bias, shape=(1, y.type.shape[1], 1, 1, 1)))
    one_d = x.type.rank == 3
    if one_d:  # a height-1 image: the same values
        n, c, width = x.type.shape
        x = b.Reshape(x, shape=(n, c, 1, width))
        w = b.Reshape(w, shape=(*w.type.shape[:2], 1, w.type.shape[2]))
        strides, dilations, extra = (1, *strides), (1, *dilations), (0, *extra)
        pads = (0, pads[0], 0, pads[1])
    flipped = _flipped_filter(b, w, group)
    grid = _transposed_grid(b, x, flipped.type.shape[2:], (strides, dilations, pads, extra))
    y = b.conv(grid, flipped, bias, dilations=dilations, group=group)
    if one_d:
        n, m, _, width = y.type.shape
        return b.Reshape(y, shape=(n, m, width))
    return y


@node
class ConvTranspose:
    """Transposed (fractionally strided) convolution over 1, 2 or 3 spatial dims, ONNX's
    ConvTranspose with explicit pads: a stride-1 convolution of the zero-spread input with
    the flipped, channel-swapped filter, plus the bias."""

    input = In("[N, C, *spatial]")
    filter = In("[C, M/group, *kernel] (ONNX's layout)")
    bias = In("[M] (zeros when absent)")
    strides = Attr(tuple, doc="one per spatial dim")
    pads = Attr(tuple, doc="all begins, then all ends; they trim the full output")
    dilations = Attr(tuple, doc="one per spatial dim")
    output_padding = Attr(tuple, doc="added at the end of each spatial dim")
    group = Attr(int, 1)
    examples = (
        ex("f32[1,2,4,5]", "f32[2,3,3,3]", "f32[3]", strides=(2, 2), pads=(1, 0, 1, 1),
           dilations=(1, 1), output_padding=(1, 0)),
        ex("f32[2,4,6]", "f32[4,1,3]", "f32[2]", strides=(3,), pads=(0, 1), dilations=(2,),
           output_padding=(0,), group=2),
        ex("f32[1,2,3,3,2]", "f32[2,2,2,2,2]", "f32[2]", strides=(2, 1, 2), pads=(0, 0, 0, 0, 1, 0),
           dilations=(1, 1, 1), output_padding=(0, 0, 1)),
    )  # fmt: skip

    def type(input, filter, bias, strides, pads, dilations, output_padding, group):
        return _conv_transpose_type(input, filter, bias, (strides, pads, dilations, output_padding), group)

    def lower(b, input, filter, bias, strides, pads, dilations, output_padding, group):
        attrs = (strides, pads, dilations, output_padding)
        return _lower_conv_transpose(b, input, filter, bias, attrs, group)
