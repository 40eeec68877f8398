"""Pooling beyond the 2-D primitives: any rank, dilations, LpPool, MaxPool's Indices output.

glow's MaxPool/AvgPool primitives are 2-D without dilation; everything else is lowered by
gathering every window's elements (a load-time index table over the padded input) into a
trailing axis and reducing it: ReduceMax, ReduceSum over a load-time divisor, or the p-norm.
The fast 2-D path in ``ops_window`` is used whenever it applies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind

WINDOW_ATTRS = {"kernel_shape": 1, "strides": 1, "dilations": 1, "output_padding": 0, "pads": 0}
"""The smallest value ONNX allows in each per-dim window attribute (a stride of 0 divides by zero)."""

SPATIAL = "spatial dim of input 0"
PAD_ENDS = "begin and end of each spatial dim"


def window_ints(ctx: NodeContext, key: str, default: int, dims: int) -> list[int]:
    """A per-spatial-dim window attribute of a ``dims``-D window op (pads: two per dim),
    checked for length and range once for every convolution and pooling importer."""
    count, per = (2 * dims, PAD_ENDS) if key == "pads" else (dims, SPATIAL)
    return ctx.ints_attr(key, default, count, per, low=WINDOW_ATTRS[key])


def window_geometry(ctx: NodeContext, size: Sequence[int]) -> tuple[list[int], ...]:
    """(kernel, strides, dilations, pad begins, pad ends) of a pooling node, ceil_mode applied."""
    d = len(size)
    kernel = window_ints(ctx, "kernel_shape", 1, d)
    strides, dilations = window_ints(ctx, "strides", 1, d), window_ints(ctx, "dilations", 1, d)
    reach = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations, strict=True)]
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max((math.ceil(n / s) - 1) * s + r - n, 0) for n, s, r in zip(size, strides, reach, strict=True)
        ]
        small, large = [t // 2 for t in total], [t - t // 2 for t in total]
        begin, end = (small, large) if auto == "SAME_UPPER" else (large, small)
    elif auto == "VALID":
        begin, end = [0] * d, [0] * d
    else:
        pads = window_ints(ctx, "pads", 0, d)
        begin, end = pads[:d], pads[d:]
    extra = [0] * d
    if ctx.attr("ceil_mode", 0):
        for i, (n, r, s) in enumerate(zip(size, reach, strides, strict=True)):
            out = math.ceil((n + begin[i] + end[i] - r) / s) + 1
            if (out - 1) * s >= n + begin[i]:  # a last window starting in the end padding is dropped
                out -= 1
            extra[i] = max((out - 1) * s + r - (n + begin[i] + end[i]), 0)
    return kernel, strides, dilations, begin, end, extra


def _window_table(padded: Sequence[int], kernel, strides, dilations) -> tuple[np.ndarray, tuple[int, ...]]:
    """[windows, K] flat positions (in the padded spatial grid) of each window's elements."""
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    out = tuple((p - r) // s + 1 for p, r, s in zip(padded, reach, strides, strict=True))
    if min(out) < 1:
        raise ShapeError(f"window {list(kernel)} is larger than the padded input {list(padded)}")
    starts = np.stack([g.reshape(-1) for g in np.indices(out)], axis=1) * np.array(strides)
    offsets = np.stack([g.reshape(-1) for g in np.indices(kernel)], axis=1) * np.array(dilations)
    coords = starts[:, None, :] + offsets[None, :, :]  # [windows, K, dims]
    return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), padded).astype(np.int64), out


def gather_windows(
    b: Builder, x: Node, geometry: tuple[list[int], ...], fill: float
) -> tuple[Node, tuple[int, ...], np.ndarray]:
    """x's windows as [N, C, windows, K], the output spatial shape, and the index table."""
    kernel, strides, dilations, begin, end, extra = geometry
    n, c = x.type.shape[:2]
    tail = [e + x_ for e, x_ in zip(end, extra, strict=True)]
    if any(begin) or any(tail):
        x = b.Pad(x, pads=(0, 0, *begin, 0, 0, *tail), value=fill)
    padded = x.type.shape[2:]
    table, out = _window_table(padded, kernel, strides, dilations)
    flat = b.Reshape(x, shape=(n, c, math.prod(padded)))
    return b.Gather(flat, build.constant(b, table, "windows"), axis=2), out, table


def _counts(size: Sequence[int], geometry: tuple[list[int], ...], include_pad: bool) -> np.ndarray:
    """Per window, how many elements count in an average (real ones, plus declared pads if asked)."""
    kernel, strides, dilations, begin, end, extra = geometry
    ones = np.ones(size)
    ones = np.pad(
        ones, [(p, q) for p, q in zip(begin, end, strict=True)], constant_values=1.0 if include_pad else 0.0
    )
    ones = np.pad(ones, [(0, e) for e in extra], constant_values=0.0)
    table, _ = _window_table(ones.shape, kernel, strides, dilations)
    return ones.reshape(-1)[table].sum(axis=1)


def _max_indices(
    b: Builder, windows: Node, table: np.ndarray, x_shape: tuple[int, ...], geometry, column_major: bool
) -> Node:
    """ONNX MaxPool Indices: the flat input index of each window's maximum."""
    _, _, _, begin, end, extra = geometry
    spatial = x_shape[2:]
    padded = [s + p + q + e for s, p, q, e in zip(spatial, begin, end, extra, strict=True)]
    coords = np.stack(np.unravel_index(table, padded), axis=-1) - np.array(begin)
    dims = spatial[::-1] if column_major else spatial
    coords = coords[..., ::-1] if column_major else coords
    clipped = np.clip(coords, 0, np.array(dims) - 1)
    source = np.ravel_multi_index(tuple(np.moveaxis(clipped, -1, 0)), dims)  # [windows, K]
    n, c, w, k = windows.type.shape
    pick = b.ArgMax(windows, axis=3)  # [N, C, W, 1]
    flat = b.add(pick, build.constant(b, (np.arange(w, dtype=np.int64) * k).reshape(1, 1, w, 1), "row"))
    index = b.Gather(build.constant(b, source.reshape(-1).astype(np.int64), "source"), flat, axis=0)
    base = (np.arange(n * c, dtype=np.int64) * math.prod(spatial)).reshape(n, c, 1, 1)
    return b.add(index, build.constant(b, base, "base"))


def _lowest(ctx: NodeContext, x: Node) -> float | int:
    """What a max pool pads with: -inf, or an integer type's lowest value (-inf does not fit)."""
    if x.type.elem.is_float:
        return -math.inf
    if x.type.elem.is_narrow:  # held as bytes; only casts read them
        raise ctx.refuse(f"{ctx.op_type} of {x.type} is not supported: narrow kinds are only cast")
    return int(np.iinfo(x.type.dtype).min)


def pool(ctx: NodeContext) -> list[Node]:
    """MaxPool / AveragePool / LpPool by window gathering (any rank, dilations, indices)."""
    x, b = ctx.node(0), ctx.b
    n, c, *size = x.type.shape
    geometry = window_geometry(ctx, size)
    op = ctx.op_type
    fill = _lowest(ctx, x) if op == "MaxPool" else 0.0
    windows, out, table = gather_windows(b, x, geometry, fill)
    shape = (n, c, *out)
    if op == "MaxPool":
        y = b.Reshape(b.ReduceMax(windows, axes=(3,)), shape=shape, name=ctx.name)
        if not ctx.output_requested(1):
            return [y]
        indices = _max_indices(b, windows, table, x.type.shape, geometry, bool(ctx.attr("storage_order", 0)))
        return [y, b.Reshape(indices, shape=shape)]
    if op == "LpPool":
        p = ctx.int_attr("p", 2, low=1)
        powered = b.Pow(build.absolute(b, windows), b.splat(p, windows))
        total = b.ReduceSum(powered, axes=(3,))
        return [b.Reshape(b.Pow(total, b.splat(1.0 / p, total)), shape=shape, name=ctx.name)]
    counts = _counts(size, geometry, bool(ctx.attr("count_include_pad", 0)))
    total = b.ReduceSum(windows, axes=(3,))
    divisor = build.constant(b, counts.reshape(1, 1, -1, 1).astype(x.type.dtype), "counts")
    return [b.Reshape(b.div(total, divisor), shape=shape, name=ctx.name)]


@importer("LpPool", ranks={0: Rank.at_least(3)})
def _lp_pool(ctx: NodeContext) -> list[Node]:
    return pool(ctx)


@importer("MaxUnpool", ranks={0: Rank.at_least(3), 2: 1})
def _max_unpool(ctx: NodeContext) -> Node:
    """Zeros with X written at the flat positions in I (a ScatterElements on the flattened
    inferred shape), then zero-padded at the end up to ``output_shape`` when it is given."""
    x, indices, b = ctx.node(0), ctx.node(1), ctx.b
    if indices.type.shape != x.type.shape:
        raise ShapeError(f"indices {indices.type} must have the shape of the input {x.type}")
    n, c, *size = x.type.shape
    d = len(size)
    kernel, strides = window_ints(ctx, "kernel_shape", 1, d), window_ints(ctx, "strides", 1, d)
    pads = window_ints(ctx, "pads", 0, d)
    spatial = [
        (s - 1) * st + k - pads[i] - pads[i + d]
        for i, (s, st, k) in enumerate(zip(size, strides, kernel, strict=True))
    ]
    inferred = (n, c, *spatial)
    zeros = b.splat(0.0, x.type.with_shape((math.prod(inferred),)))
    flat_index = b.Reshape(build.convert(b, indices, ElemKind.int64), shape=(indices.type.size,))
    scattered = b.ScatterElements(zeros, flat_index, b.Reshape(x, shape=(x.type.size,)), axis=0)
    y = b.Reshape(scattered, shape=inferred)
    if not ctx.has(2):
        return y
    target = ctx.ints(2, "output_shape")
    if len(target) != len(inferred):
        raise ShapeError(f"output_shape {target} must have the input's rank {len(inferred)}")
    grow = [t - s for t, s in zip(target, inferred, strict=True)]
    if min(grow) < 0:
        raise ShapeError(f"output_shape {target} is smaller than the unpooled shape {list(inferred)}")
    return b.Pad(y, pads=(0,) * len(grow) + tuple(grow), name=ctx.name) if any(grow) else y


@importer("Col2Im", ranks={0: 3, 1: 1, 2: 1})
def _col2im(ctx: NodeContext) -> Node:
    """Sum sliding-window columns back into an image: a MatMul with a load-time 0/1 scatter matrix."""
    x, b = ctx.node(0), ctx.b
    image, block = ctx.ints(1, "image_shape"), ctx.ints(2, "block_shape")
    d = len(image)
    if d < 1 or len(block) != d or min(image) < 1 or min(block) < 1:
        raise ShapeError(
            f"image_shape {image} and block_shape {block} must be two lists of one positive size per "
            "spatial dim"
        )
    strides, dilations = window_ints(ctx, "strides", 1, d), window_ints(ctx, "dilations", 1, d)
    pads = window_ints(ctx, "pads", 0, d)
    padded = [s + pads[i] + pads[i + d] for i, s in enumerate(image)]
    table, _ = _window_table(padded, block, strides, dilations)  # [L, K] positions in the padded image
    coords = np.stack(np.unravel_index(table, padded), axis=-1) - np.array(pads[:d])
    inside = np.all((coords >= 0) & (coords < np.array(image)), axis=-1)
    target = np.ravel_multi_index(tuple(np.moveaxis(np.clip(coords, 0, np.array(image) - 1), -1, 0)), image)
    windows, k = table.shape
    scatter = np.zeros((k, windows, math.prod(image)), x.type.dtype)
    rows, cols = np.nonzero(inside)  # (window l, offset k) pairs that land in the image
    scatter[cols, rows, target[rows, cols]] = 1
    n, ck, length = x.type.shape
    if ck % k or length != windows:
        raise ShapeError(f"input {x.type} must be [N, C * {k} (block size), {windows} (blocks in the image)]")
    c = ck // k
    flat = b.Reshape(x, shape=(n * c, k * length))
    y = b.MatMul(flat, build.constant(b, scatter.reshape(k * windows, -1), "scatter"))
    return b.Reshape(y, shape=(n, c, *image), name=ctx.name)
