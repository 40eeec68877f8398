"""Importers for pooling: MaxPool (with its Indices), AveragePool, LpPool, the global
pools and MaxUnpool each become the high-level node of glow_core.graph.nodes.pooling; the
importer only checks and maps attributes (``auto_pad`` resolved into explicit pads). Also
Col2Im and ``window_ints``, the per-spatial-dim attribute reader every window op shares.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.node import Node
from glow_core.graph.nodes.pool_windows import same_pads, window_table
from glow_core.types import ElemKind

WINDOW_ATTRS = {"kernel_shape": 1, "strides": 1, "dilations": 1, "output_padding": 0, "pads": 0}
"""The smallest value ONNX allows in each per-dim window attribute (a stride of 0 divides by zero)."""

SPATIAL = "spatial dim of input 0"
PAD_ENDS = "begin and end of each spatial dim"
AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def window_ints(ctx: NodeContext, key: str, default: int, dims: int) -> list[int]:
    """A per-spatial-dim window attribute of a ``dims``-D window op (pads: two per dim),
    checked for length and range once for every convolution and pooling importer."""
    count, per = (2 * dims, PAD_ENDS) if key == "pads" else (dims, SPATIAL)
    return ctx.ints_attr(key, default, count, per, low=WINDOW_ATTRS[key])


def _window(ctx: NodeContext, dims: int, size: list[int]) -> dict[str, tuple[int, ...]]:
    """kernel, strides, dilations and explicit pads of a pooling node (``auto_pad`` resolved)."""
    if ctx.attr("kernel_shape") is None:
        raise ctx.invalid("attribute 'kernel_shape' is required (one window size per spatial dim)")
    kernel = window_ints(ctx, "kernel_shape", 1, dims)
    strides, dilations = window_ints(ctx, "strides", 1, dims), window_ints(ctx, "dilations", 1, dims)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto not in AUTO_PADS:
        raise ctx.refuse(f"auto_pad {auto!r} is not one of {', '.join(AUTO_PADS)}")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(size, (kernel, strides, dilations), upper=auto == "SAME_UPPER")
    elif auto == "VALID":
        pads = [0] * (2 * dims)
    else:
        pads = window_ints(ctx, "pads", 0, dims)
    return {
        "kernel": tuple(kernel),
        "strides": tuple(strides),
        "dilations": tuple(dilations),
        "pads": tuple(pads),
        "ceil_mode": bool(ctx.attr("ceil_mode", 0)),
    }


@importer("MaxPool", "AveragePool", "LpPool", ranks={0: Rank.at_least(3)})
def _pool(ctx: NodeContext) -> Node | list[Node]:
    """One MaxPoolNd / AvgPoolNd / LpPool node (and MaxPoolIndices for MaxPool's Indices)."""
    x, b = ctx.node(0), ctx.b
    if x.type.elem.is_narrow:  # held as bytes; only casts read them
        raise ctx.refuse(f"{ctx.op_type} of {x.type} is not supported: narrow kinds are only cast")
    window = _window(ctx, x.type.rank - 2, list(x.type.shape[2:]))
    if ctx.op_type == "AveragePool":
        return b.AvgPoolNd(
            x, count_include_pad=bool(ctx.attr("count_include_pad", 0)), name=ctx.name, **window
        )
    if ctx.op_type == "LpPool":
        return b.LpPool(x, p=ctx.int_attr("p", 2, low=1), name=ctx.name, **window)
    y = b.MaxPoolNd(x, name=ctx.name, **window)
    if not ctx.output_requested(1):
        return y
    return [y, b.MaxPoolIndices(x, storage_order=int(ctx.attr("storage_order", 0)), **window)]


@importer("GlobalAveragePool", "GlobalMaxPool", ranks={0: Rank.at_least(3)})
def _global_pool(ctx: NodeContext) -> Node:
    """Reduce over every spatial dim, keeping them as size 1 (as ONNX does)."""
    kind = "GlobalAveragePool" if ctx.op_type == "GlobalAveragePool" else "GlobalMaxPool"
    return ctx.b.create(kind, ctx.node(0), name=ctx.name)


@importer("MaxUnpool", ranks={0: Rank.at_least(3), 2: 1})
def _max_unpool(ctx: NodeContext) -> Node:
    """One MaxUnpool node; the optional ``output_shape`` input must be known at load time."""
    x, indices = ctx.node(0), ctx.node(1)
    d = x.type.rank - 2
    kernel, strides = window_ints(ctx, "kernel_shape", 1, d), window_ints(ctx, "strides", 1, d)
    output_shape = tuple(ctx.ints(2, "output_shape")) if ctx.has(2) else ()
    return ctx.b.MaxUnpool(
        x,
        build.convert(ctx.b, indices, ElemKind.int64) if indices.type.elem is not ElemKind.int64 else indices,
        kernel=tuple(kernel),
        strides=tuple(strides),
        pads=tuple(window_ints(ctx, "pads", 0, d)),
        output_shape=output_shape,
        name=ctx.name,
    )


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
    table = window_table(padded, block, strides, dilations)  # [L, K] positions in the padded image
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
