"""Importers for sampling at run-time coordinates: GridSample and AffineGrid.

GridSample reads X at coordinates computed from a run-time grid, so the taps are gathers
at computed int64 indices (``build.gather_at``), one per neighbour combination, weighted
and summed. Border handling (zeros, border, reflection) follows the ONNX definition,
including its reflection of out-of-range coordinates about the pixel-grid borders.
"""

from __future__ import annotations

import itertools

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.ops_index import iota
from glow_core.frontends.onnx.ops_pool import window_ints
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.linear_quant import round_half_even
from glow_core.types import ElemKind


def _reflect(b: Builder, v: Node, low: float, high: float) -> Node:
    """v folded back into [low, high] by repeated reflection about the borders."""
    span = high - low
    below = b.Compare(v, b.splat(low, v), predicate="lt")
    above = b.Compare(b.splat(high, v), v, predicate="lt")
    distance = b.Select(below, b.Sub(b.splat(low, v), v), b.Sub(v, b.splat(high, v)))
    if span == 0:
        return b.Select(below, b.splat(low, v), b.Select(above, b.splat(high, v), v))
    folds = b.Floor(b.Mul(distance, b.splat(1.0 / span, v)))
    rest = b.Sub(distance, b.Mul(folds, b.splat(span, v)))
    even = b.Compare(
        b.Sub(folds, b.Mul(b.Floor(b.Mul(folds, b.splat(0.5, v))), b.splat(2.0, v))), b.splat(0.0, v)
    )
    from_low, from_high = b.Add(b.splat(low, v), rest), b.Sub(b.splat(high, v), rest)
    low_side = b.Select(even, from_low, from_high)
    high_side = b.Select(even, from_high, from_low)
    return b.Select(below, low_side, b.Select(above, high_side, v))


def _cubic_weights(b: Builder, t: Node) -> list[Node]:
    """Keys cubic coefficients (A = -0.75) of the taps at -1, 0, 1, 2 for fraction t."""
    a = -0.75

    def far(x: Node) -> Node:  # 1 < x < 2
        return b.Sub(
            b.Mul(b.Add(b.Mul(b.Sub(b.Mul(x, b.splat(a, x)), b.splat(5 * a, x)), x), b.splat(8 * a, x)), x),
            b.splat(4 * a, x),
        )

    def near(x: Node) -> Node:  # x <= 1
        return b.Add(
            b.Mul(b.Mul(b.Sub(b.Mul(x, b.splat(a + 2, x)), b.splat(a + 3, x)), x), x), b.splat(1.0, x)
        )

    one = b.splat(1.0, t)
    return [far(b.Add(t, one)), near(t), near(b.Sub(one, t)), far(b.Sub(b.splat(2.0, t), t))]


def _axis_taps(b: Builder, x: Node, mode: str) -> list[tuple[Node, Node]]:
    """(integer position, weight) of each tap along one axis for source coordinates ``x``."""
    if mode == "nearest":
        return [(x, b.splat(1.0, x))]
    low = b.Floor(x)
    frac = b.Sub(x, low)
    if mode == "linear":
        return [(low, b.Sub(b.splat(1.0, frac), frac)), (b.Add(low, b.splat(1.0, low)), frac)]
    return [
        (b.Add(low, b.splat(float(k), low)), w)
        for k, w in zip((-1, 0, 1, 2), _cubic_weights(b, frac), strict=True)
    ]


def _fetch_index(
    b: Builder, position: Node, size: int, padding: str, borders: tuple[float, float]
) -> tuple[Node, Node | None]:
    """An in-range int64 index for a tap position, and (zeros padding) whether it was in range."""
    valid = None
    if padding == "border":
        position = b.Clip(position, low=0.0, high=float(size - 1))
    elif padding == "reflection":
        position = _reflect(b, position, *borders)
    else:
        inside_low = b.Compare(b.splat(-1.0, position), position, predicate="lt")
        inside_high = b.Compare(position, b.splat(float(size), position), predicate="lt")
        valid = b.Select(inside_low, inside_high, b.splat(False, inside_low))
        position = b.Clip(position, low=0.0, high=float(size - 1))
    return b.Convert(position, elem="int64"), valid


@importer("GridSample", ranks={0: Rank.at_least(3)})
def _grid_sample(ctx: NodeContext) -> Node:
    x, grid, b = ctx.node(0), ctx.node(1), ctx.b
    n, spatial = x.type.shape[0], x.type.rank - 2
    if grid.type.rank != x.type.rank or grid.type.shape[0] != n or grid.type.shape[-1] != spatial:
        raise ShapeError(
            f"grid {grid.type} must be [{n}, output dims..., {spatial}] for the {spatial}-D input {x.type}"
        )
    given = ctx.attr("mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(given, given)
    padding, align = ctx.attr("padding_mode", "zeros"), bool(ctx.attr("align_corners", 0))
    if mode not in ("linear", "nearest", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise ctx.invalid(
            f"mode {given!r} / padding_mode {padding!r}: ONNX defines modes linear (bilinear), "
            "nearest and cubic (bicubic), and padding modes zeros, border and reflection"
        )
    n, c, *size = x.type.shape
    d, out = len(size), grid.type.shape[1:-1]
    grid = build.convert(b, grid, x.type.elem)
    taps_per_axis = []
    for axis, length in enumerate(size):
        column = d - 1 - axis  # the grid lists coordinates innermost (width) first
        g = b.Reshape(
            b.Slice(grid, starts=(0,) * (d + 1) + (column,), ends=(n, *out, column + 1)), shape=(n, *out)
        )
        pos = b.Mul(b.Add(g, b.splat(1.0, g)), b.splat((length - 1) / 2 if align else length / 2, g))
        pos = pos if align else b.Sub(pos, b.splat(0.5, pos))
        borders = (0.0, float(length - 1)) if align else (-0.5, length - 0.5)
        if mode == "nearest":
            pos = round_half_even(b, pos)
        if padding == "border":  # only coordinates beyond the borders are clamped
            outside = b.Select(
                b.Compare(pos, b.splat(borders[0], pos), predicate="lt"),
                b.splat(True, pos.type.with_elem(ElemKind.bool)),
                b.Compare(b.splat(borders[1], pos), pos, predicate="lt"),
            )
            pos = b.Select(outside, b.Clip(pos, low=0.0, high=float(length - 1)), pos)
        elif padding == "reflection":
            pos = _reflect(b, pos, *borders)
        taps_per_axis.append(
            [(*_fetch_index(b, p, length, padding, borders), w) for p, w in _axis_taps(b, pos, mode)]
        )
    spatial_shape = (n, 1, *out)
    total: Node | None = None
    for combo in itertools.product(*taps_per_axis):
        coords = [iota((n, c, *out), 0), iota((n, c, *out), 1)] + [
            b.Reshape(index, shape=spatial_shape) for index, _, _ in combo
        ]
        value = build.gather_at(b, x, coords)
        weight = None
        for _, valid, w in combo:
            w = w if valid is None else b.Mul(w, b.Convert(valid, elem=w.type.elem.name))
            weight = w if weight is None else b.Mul(weight, w)
        term = b.mul(b.reshape(value, (n, c, *out)), b.Reshape(weight, shape=spatial_shape))
        total = term if total is None else b.Add(total, term)
    assert total is not None
    return total


@importer("AffineGrid", ranks={0: 3, 1: 1})
def _affine_grid(ctx: NodeContext) -> Node:
    """theta [N, d, d+1] applied to the normalized base grid (x innermost, then y, z, 1)."""
    theta, b = ctx.node(0), ctx.b
    size = ctx.ints(1, "size")
    if len(size) not in (4, 5) or min(size) < 0:
        raise ShapeError(f"size {size} must be [N, C, H, W] or [N, C, D, H, W]")
    n, spatial = size[0], size[2:]
    d = len(spatial)
    ctx.check_shape(0, (n, d, d + 1), "theta")
    align = bool(ctx.attr("align_corners", 0))
    axes = []
    for length in spatial:
        steps = np.arange(length, dtype=np.float64)
        axes.append(steps * 2 / (length - 1) - 1 if align and length > 1 else (2 * steps + 1) / length - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    homogeneous = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    base = build.constant(b, homogeneous.astype(theta.type.dtype), "base_grid")
    points = b.matmul(base, b.Transpose(theta, shuffle=(0, 2, 1)))  # [N, points, d]
    return b.Reshape(points, shape=(n, *spatial, len(spatial)), name=ctx.name)


def _roi_axis(
    b: Builder, start: Node, size: Node, bins: int, grid: int, length: int
) -> tuple[Node, Node, Node, Node]:
    """Per roi and sample along one axis: (low, high) int64 taps, fraction, and validity."""
    steps = (np.arange(bins)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(1, -1)
    pos = b.add(
        start,
        b.mul(b.Div(size, b.splat(float(bins), size)), build.constant(b, steps.astype(np.float32), "steps")),
    )
    valid = b.Select(
        b.Compare(pos, b.splat(-1.0, pos), predicate="lt"),
        b.splat(False, pos.type.with_elem(ElemKind.bool)),
        b.Compare(pos, b.splat(float(length), pos), predicate="le"),
    )
    pos = b.Max(pos, b.splat(0.0, pos))
    low = b.Floor(pos)
    at_end = b.Compare(b.splat(float(length - 1), low), low, predicate="le")
    last = b.splat(float(length - 1), low)
    low = b.Select(at_end, last, low)
    high = b.Select(at_end, last, b.Add(low, b.splat(1.0, low)))
    frac = b.Select(at_end, b.splat(0.0, pos), b.Sub(pos, low))
    return b.Convert(low, elem="int64"), b.Convert(high, elem="int64"), frac, valid


@importer("RoiAlign", ranks={0: 4, 1: 2, 2: 1})
def _roi_align(ctx: NodeContext) -> Node:
    """Bilinear samples on a fixed grid per output bin (sampling_ratio > 0), averaged or maxed."""
    x, rois, b = ctx.node(0), build.convert(ctx.b, ctx.node(1), ElemKind.float32), ctx.b
    _, c, h, w = x.type.shape
    r = rois.type.shape[0]
    ctx.check_shape(1, (r, 4), "rois")
    ctx.check_shape(2, (r,), "batch_indices")
    ph, pw = ctx.int_attr("output_height", 1, low=1), ctx.int_attr("output_width", 1, low=1)
    grid = int(ctx.attr("sampling_ratio", 0))
    if grid <= 0:
        raise ctx.refuse(
            "sampling_ratio=0 (a per-roi adaptive grid) is not supported; export with sampling_ratio > 0"
        )
    half = (
        ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
        == "half_pixel"
    )
    scale = float(ctx.attr("spatial_scale", 1.0))

    def column(k: int) -> Node:
        value = b.Slice(rois, starts=(0, k), ends=(r, k + 1))
        return b.Sub(b.Mul(value, b.splat(scale, value)), b.splat(0.5 if half else 0.0, value))

    x1, y1, x2, y2 = (column(k) for k in range(4))
    height, width = b.Sub(y2, y1), b.Sub(x2, x1)
    if not half:
        height, width = b.Max(height, b.splat(1.0, height)), b.Max(width, b.splat(1.0, width))
    y_low, y_high, ly, y_ok = _roi_axis(b, y1, height, ph, grid, h)
    x_low, x_high, lx, x_ok = _roi_axis(b, x1, width, pw, grid, w)
    rows, cols = ph * grid, pw * grid
    batch = b.Reshape(build.convert(b, ctx.node(2), ElemKind.int64), shape=(r, 1, 1, 1))
    channel = iota((1, c, 1, 1), 1)

    def as_rows(v: Node) -> Node:
        return b.Reshape(v, shape=(r, 1, rows, 1))

    def as_cols(v: Node) -> Node:
        return b.Reshape(v, shape=(r, 1, 1, cols))

    valid = b.Convert(
        build.select(b, as_rows(y_ok), as_cols(x_ok), b.splat(False, as_cols(x_ok))), elem=x.type.elem.name
    )
    terms = []
    for yi, wy in ((y_low, b.Sub(b.splat(1.0, ly), ly)), (y_high, ly)):
        for xi, wx in ((x_low, b.Sub(b.splat(1.0, lx), lx)), (x_high, lx)):
            value = b.reshape(
                build.gather_at(b, x, [batch, channel, as_rows(yi), as_cols(xi)]), (r, c, rows, cols)
            )
            weight = b.mul(b.mul(as_rows(wy), as_cols(wx)), valid)
            terms.append(b.mul(value, weight))
    if ctx.attr("mode", "avg") == "max":
        merged = b.Max(b.Max(terms[0], terms[1]), b.Max(terms[2], terms[3]))
        pooled = b.ReduceMax(b.Reshape(merged, shape=(r, c, ph, grid, pw, grid)), axes=(3, 5))
    else:
        total = b.Add(b.Add(terms[0], terms[1]), b.Add(terms[2], terms[3]))
        pooled = b.ReduceSum(b.Reshape(total, shape=(r, c, ph, grid, pw, grid)), axes=(3, 5))
        pooled = b.Mul(pooled, b.splat(1.0 / (grid * grid), pooled))
    return b.Reshape(pooled, shape=(r, c, ph, pw), name=ctx.name)


def _per_channel_groups(b: Builder, v: Node, channels: int) -> Node:
    """[N, G, K, OH, OW] (one entry per offset group) repeated to [N, C, K, OH, OW]."""
    n, groups, *rest = v.type.shape
    spread = b.Broadcast(
        b.Reshape(v, shape=(n, groups, 1, *rest)), shape=(n, groups, channels // groups, *rest)
    )
    return b.Reshape(spread, shape=(n, channels, *rest))


def _deformed_samples(ctx: NodeContext, x: Node, kernel: tuple[int, int], out: tuple[int, int]) -> Node:
    """Bilinear samples of x at the offset kernel positions: [N, C, K, OH, OW] (zeros outside)."""
    b = ctx.b
    n, c, h, w = x.type.shape
    (kh, kw), (oh, ow) = kernel, out
    strides, dilations = window_ints(ctx, "strides", 1, 2), window_ints(ctx, "dilations", 1, 2)
    pads = window_ints(ctx, "pads", 0, 2)
    groups = ctx.int_attr("offset_group", 1, low=1)
    if c % groups:
        raise ShapeError(f"{c} channels of {x.type} do not split into offset_group = {groups} groups")
    offsets = b.Reshape(ctx.node(2), shape=(n, groups, kh * kw, 2, oh, ow))
    samples: Node | None = None
    per_axis = []
    for axis, (length, stride, dil, pad) in enumerate(zip((h, w), strides, dilations, pads[:2], strict=True)):
        grid = np.indices((kh, kw, oh, ow))
        base = grid[2 + axis] * stride - pad + grid[axis] * dil
        shift = b.Reshape(
            b.Slice(offsets, starts=(0, 0, 0, axis, 0, 0), ends=(n, groups, kh * kw, axis + 1, oh, ow)),
            shape=(n, groups, kh * kw, oh, ow),
        )
        pos = b.add(
            build.convert(b, shift, x.type.elem),
            build.constant(b, base.reshape(1, 1, kh * kw, oh, ow).astype(x.type.dtype), "base"),
        )
        pos = _per_channel_groups(b, pos, c)
        per_axis.append(
            [(*_fetch_index(b, p, length, "zeros", (0.0, 0.0)), wt) for p, wt in _axis_taps(b, pos, "linear")]
        )
    shape = (n, c, kh * kw, oh, ow)
    for (yi, y_ok, wy), (xi, x_ok, wx) in itertools.product(*per_axis):
        value = b.reshape(build.gather_at(b, x, [iota(shape, 0), iota(shape, 1), yi, xi]), shape)
        ok = b.Select(y_ok, x_ok, b.splat(False, x_ok))
        term = b.Mul(value, b.Mul(b.Mul(wy, wx), b.Convert(ok, elem=x.type.elem.name)))
        samples = term if samples is None else b.Add(samples, term)
    assert samples is not None
    if ctx.has(4):  # modulation mask, one per offset group
        mask = b.Reshape(build.convert(b, ctx.node(4), x.type.elem), shape=(n, groups, kh * kw, oh, ow))
        samples = b.Mul(samples, _per_channel_groups(b, mask, c))
    return samples


@importer("DeformConv", ranks={0: Rank.at_least(3), 1: Rank.at_least(3), 2: Rank.at_least(3), 3: 1})
def _deform_conv(ctx: NodeContext) -> Node:
    """Deformable convolution: bilinear samples at offset positions, then a grouped MatMul with W."""
    x, weight, b = ctx.node(0), ctx.node(1), ctx.b
    if x.type.rank != 4:
        raise ctx.refuse(f"only 2-D DeformConv is supported, input is {x.type}")
    ctx.check_ranks([(index, Rank.exactly(4)) for index in (1, 2, 4)])  # weight, offsets, mask
    n = x.type.shape[0]
    oc, cg, kh, kw = weight.type.shape
    oh, ow = ctx.shape(2)[2:]
    group = ctx.int_attr("group", 1, low=1)
    if oc % group or cg * group != x.type.shape[1]:
        raise ShapeError(f"weight {weight.type} does not fit group = {group} over the input {x.type}")
    samples = _deformed_samples(ctx, x, (kh, kw), (oh, ow))  # [N, C, K, OH, OW]
    columns = b.Reshape(samples, shape=(n, group, cg * kh * kw, oh * ow))
    filters = b.Reshape(weight, shape=(1, group, oc // group, cg * kh * kw))
    y = b.Reshape(b.matmul(filters, columns), shape=(n, oc, oh, ow))
    if ctx.has(3):
        y = b.add(y, b.Reshape(ctx.node(3), shape=(1, oc, 1, 1)))
    return y
