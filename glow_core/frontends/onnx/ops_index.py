"""Importers for indexing: gathers and scatters of every ONNX form, TopK, OneHot, CumSum.

Every gather-like op becomes one core ``Gather`` on the flattened data at an int64 flat
index computed from per-dimension coordinates (``build.gather_at``); scatters become
ScatterElements, TopK its indices plus a gather of the values.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, Value, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.indexing import iota as iota  # shared with node lowerings
from glow_core.types import ElemKind


def wrap_index(b: Builder, index: Node, size: int) -> Node:
    """Negative indices counted from the end: index < 0 ? index + size : index, as int64."""
    index = build.convert(b, index, ElemKind.int64)
    zero = b.splat(0, index)
    return b.Select(b.Compare(index, zero, predicate="lt"), b.Add(index, b.splat(size, index)), index)


def _index_input(ctx: NodeContext, position: int, size: int) -> Node | np.ndarray:
    """An index operand, wrapped into [0, size): at load time when it is a constant."""
    if ctx.is_static(position):
        array = ctx.static(position, "indices").astype(np.int64)
        if array.size and (array.min() < -size or array.max() >= size):
            raise ShapeError(f"indices {array.tolist()} out of range for size {size}")
        return np.where(array < 0, array + size, array)
    return wrap_index(ctx.b, ctx.node(position), size)


def gather_elements(b: Builder, data: Node, index: Node | np.ndarray, axis: int, name: str | None) -> Node:
    """data[..., index[...], ...] along ``axis`` with the index's shape (ONNX GatherElements)."""
    shape = tuple(index.shape) if isinstance(index, np.ndarray) else index.type.shape
    coords = [index if a == axis else iota(shape, a) for a in range(data.type.rank)]
    return b.reshape(build.gather_at(b, data, coords), shape, name=name)


@importer("GatherElements", fold="always", ranks={0: Rank.at_least(1)})
def _gather_elements(ctx: NodeContext) -> Node:
    data = ctx.node(0)
    ctx.check_rank(1, data.type.rank)  # indices have the data's rank
    axis = ctx.axis_attr("axis", 0, data.type.rank)
    return gather_elements(ctx.b, data, _index_input(ctx, 1, data.type.shape[axis]), axis, ctx.name)


def _nd_coordinates(b: Builder, indices: Node, data: Node, batch: int) -> tuple[list[Node], tuple[int, ...]]:
    """Per-data-dim coordinates of GatherND/ScatterND slices, and the slice-grid shape."""
    k = indices.type.shape[-1]
    grid = indices.type.shape[:-1]
    coords = []
    for m in range(k):
        starts = (0,) * (indices.type.rank - 1) + (m,)
        column = b.Slice(indices, starts=starts, ends=grid + (m + 1,))
        coords.append(wrap_index(b, b.Reshape(column, shape=grid), data.type.shape[batch + m]))
    return coords, grid


def _check_nd(ctx: NodeContext, data: Node, indices: Node, batch: int) -> int:
    """k, the length of each index tuple, after checking it addresses dims of ``data`` past
    the ``batch`` leading dims both share (ONNX GatherND/ScatterND)."""
    if not 0 <= batch < min(data.type.rank, indices.type.rank):
        raise ctx.invalid(
            f"attribute 'batch_dims' is {batch}, but ONNX requires 0 <= batch_dims < "
            f"min(rank of data, rank of indices) = {min(data.type.rank, indices.type.rank)}"
        )
    if data.type.shape[:batch] != indices.type.shape[:batch]:
        raise ShapeError(f"the {batch} batch dims of data {data.type} and indices {indices.type} differ")
    k = indices.type.shape[-1]
    if k > data.type.rank - batch:
        raise ShapeError(
            f"indices {indices.type} address {k} dims, but data {data.type} has only "
            f"{data.type.rank - batch} past the {batch} batch dims"
        )
    return k


@importer("GatherND", fold="always", ranks={0: Rank.at_least(1), 1: Rank.at_least(1)})
def _gather_nd(ctx: NodeContext) -> Node:
    data, indices, b = ctx.node(0), ctx.node(1), ctx.b
    batch = int(ctx.attr("batch_dims", 0))
    k = _check_nd(ctx, data, indices, batch)
    rest = data.type.shape[batch + k :]
    coords, grid = _nd_coordinates(b, indices, data, batch)
    out_shape = grid + rest
    tail = (1,) * len(rest)
    full = [iota(out_shape, a) for a in range(batch)]  # batch dims run along the output's
    full += [b.reshape(c, grid + tail) for c in coords]
    full += [iota(out_shape, len(grid) + j) for j in range(len(rest))]
    return b.reshape(build.gather_at(b, data, full), out_shape, name=ctx.name)


@importer("ScatterElements", "Scatter", fold="always", ranks={0: Rank.at_least(1)})
def _scatter_elements(ctx: NodeContext) -> Node:
    data = ctx.node(0)
    axis = ctx.axis_attr("axis", 0, data.type.rank)
    reduction = ctx.attr("reduction", "none")
    return ctx.b.ScatterElements(
        data, ctx.node(1), ctx.node(2), axis=axis, reduction=reduction, name=ctx.name
    )


@importer("ScatterND", fold="always", ranks={0: Rank.at_least(1), 1: Rank.at_least(1)})
def _scatter_nd(ctx: NodeContext) -> Node:
    """ScatterElements on the flattened data at the flat index of every updated element."""
    data, indices, updates, b = ctx.node(0), ctx.node(1), ctx.node(2), ctx.b
    k = _check_nd(ctx, data, indices, 0)
    expected = indices.type.shape[:-1] + data.type.shape[k:]
    if updates.type.shape != expected:
        raise ShapeError(
            f"updates {updates.type} must have shape {list(expected)} "
            f"(indices {indices.type}, data {data.type})"
        )
    coords, grid = _nd_coordinates(b, indices, data, 0)
    slice_shape = data.type.shape[k:]
    strides = [math.prod(data.type.shape[i + 1 :]) for i in range(k)]
    flat: Node | None = None
    for coord, stride in zip(coords, strides, strict=True):
        term = b.Mul(coord, b.splat(stride, coord))
        flat = term if flat is None else b.Add(flat, term)
    if flat is None:  # k = 0: every update replaces the whole tensor
        flat = build.constant(b, np.zeros(grid, np.int64), "origin")
    within = np.arange(math.prod(slice_shape), dtype=np.int64)
    grid_flat = b.reshape(flat, (math.prod(grid), 1))
    index = b.add(grid_flat, build.constant(b, within.reshape(1, -1), "within"))
    table = b.reshape(data, (data.type.size,))
    values = b.reshape(updates, (updates.type.size,))
    reduction = ctx.attr("reduction", "none")
    flat_index = b.reshape(index, (index.type.size,))
    scattered = b.ScatterElements(table, flat_index, values, axis=0, reduction=reduction)
    return b.Reshape(scattered, shape=data.type.shape, name=ctx.name)


@importer("TensorScatter")
def _tensor_scatter(ctx: NodeContext) -> Node:
    """KV-cache write: update[..., s, ...] goes to cache position write[b] + s (mod length if circular)."""
    cache, update, b = ctx.node(0), ctx.node(1), ctx.b
    axis = ctx.axis_attr("axis", -2, cache.type.rank)
    shape = update.type.shape
    position: Node | np.ndarray = iota(shape, axis)
    if ctx.has(2):
        starts = b.reshape(build.convert(b, ctx.node(2), ElemKind.int64), [-1] + [1] * (len(shape) - 1))
        position = b.add(starts, build.constant(b, position, "step"))
    length = cache.type.shape[axis]
    if ctx.attr("mode", "linear") == "circular":
        position = build.constant(b, position, "step") if isinstance(position, np.ndarray) else position
        position = b.Sub(
            position, b.Mul(b.Div(position, b.splat(length, position)), b.splat(length, position))
        )
    node = position if isinstance(position, Node) else build.constant(b, position, "step")
    index = b.broadcast_to(node, shape)
    return b.ScatterElements(cache, index, update, axis=axis, name=ctx.name)


@importer("TopK", ranks={0: Rank.at_least(1)})
def _top_k(ctx: NodeContext) -> list[Node]:
    x = ctx.node(0)
    k = int(ctx.attr("k")) if ctx.opset < 10 else ctx.int_scalar(1, "K")
    axis = ctx.axis_attr("axis", -1, x.type.rank)
    largest = bool(ctx.attr("largest", 1))
    indices = ctx.b.TopK(x, k=k, axis=axis, largest=largest, name=f"{ctx.name}:indices")
    return [gather_elements(ctx.b, x, indices, axis, f"{ctx.name}:values"), indices]


@importer("OneHot", fold="always")
def _one_hot(ctx: NodeContext) -> Node:
    """values[1] where iota == index (negative indices wrap), values[0] elsewhere."""
    indices, b = ctx.node(0), ctx.b
    depth = ctx.int_scalar(1, "depth")
    values = ctx.node(2)
    index = wrap_index(b, build.convert(b, indices, ElemKind.int64), depth)
    rank = indices.type.rank + 1
    axis = ctx.axis_attr("axis", -1, rank)
    shape = indices.type.shape[:axis] + (depth,) + indices.type.shape[axis:]
    expanded = b.reshape(index, indices.type.shape[:axis] + (1,) + indices.type.shape[axis:])
    hit = build.compare(b, build.constant(b, iota(shape, axis), "iota"), expanded, "eq")
    off = b.Reshape(b.Slice(values, starts=(0,), ends=(1,)), shape=())
    on = b.Reshape(b.Slice(values, starts=(1,), ends=(2,)), shape=())
    return build.select(b, hit, on, off, name=ctx.name)


@importer("Trilu", fold="always", ranks={0: Rank.at_least(2)})
def _trilu(ctx: NodeContext) -> Node:
    """x where the (static) triangle mask holds, 0 elsewhere."""
    x = ctx.node(0)
    k = ctx.int_scalar(1, "k") if ctx.has(1) else 0
    rows, cols = x.type.shape[-2:]
    keep = (
        np.triu(np.ones((rows, cols), bool), k)
        if ctx.attr("upper", 1)
        else np.tril(np.ones((rows, cols), bool), k)
    )
    mask = ctx.b.broadcast_to(build.constant(ctx.b, keep, "mask"), x.type.shape)
    return ctx.b.Select(mask, x, ctx.b.splat(0, x), name=ctx.name)


@importer("CumSum", "CumProd", fold="always")
def _cumulative(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    axis = ctx.axis(ctx.int_scalar(1, "axis"), x.type.rank, "input 1 (axis)")
    return ctx.b.CumReduce(
        x,
        axis=axis,
        op="sum" if ctx.op_type == "CumSum" else "prod",
        exclusive=bool(ctx.attr("exclusive", 0)),
        reverse=bool(ctx.attr("reverse", 0)),
        name=ctx.name,
    )


@importer("ReverseSequence", fold="always", ranks={0: Rank.at_least(2), 1: 1})
def _reverse_sequence(ctx: NodeContext) -> Node:
    """Gather along time at t < len[b] ? len[b] - 1 - t : t."""
    x, lengths, b = ctx.node(0), ctx.node(1), ctx.b
    batch_axis, time_axis = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise ctx.invalid(
            f"batch_axis={batch_axis} and time_axis={time_axis}: ONNX requires one to be 0, the other 1"
        )
    shape = x.type.shape
    if lengths.type.shape != (shape[batch_axis],):
        raise ShapeError(f"sequence_lens {lengths.type} must hold one length per batch entry of {x.type}")
    per_batch = b.reshape(
        build.convert(b, lengths, ElemKind.int64), [-1 if i == batch_axis else 1 for i in range(len(shape))]
    )
    t = build.constant(b, iota(shape, time_axis), "time")
    reversed_t = b.sub(b.sub(per_batch, b.splat(1, per_batch)), t)
    inside = build.compare(b, t, per_batch, "lt")
    time = build.select(b, inside, reversed_t, b.broadcast_to(t, inside.type.shape))
    coords = [time if a == time_axis else iota(shape, a) for a in range(len(shape))]
    return b.reshape(build.gather_at(b, x, coords), shape, name=ctx.name)


@importer("Compress", fold="always", ranks={1: 1})
def _compress(ctx: NodeContext) -> Node:
    """A Gather of the positions where the (load-time) condition holds."""
    x = ctx.node(0)
    condition = ctx.static(1, "condition").astype(bool).reshape(-1)
    axis = ctx.attr("axis")
    if axis is None:
        x = ctx.b.reshape(x, (x.type.size,))
        axis = 0
    axis = ctx.axis(int(axis), x.type.rank, "attribute 'axis'")
    picked = np.nonzero(condition[: x.type.shape[axis]])[0].astype(np.int64)
    return ctx.b.Gather(x, build.constant(ctx.b, picked, "picked"), axis=axis, name=ctx.name)


@importer("EyeLike", ranks={0: 2})
def _eye_like(ctx: NodeContext) -> np.ndarray:
    """Depends only on the input's shape, so it is a constant."""
    rows, cols = ctx.shape(0)
    given = "dtype" in ctx.attrs
    dtype = ctx.elem_attr("dtype").dtype if given else build.value_dtype(ctx.tensor(0))
    return np.eye(rows, cols, int(ctx.attr("k", 0)), dtype=dtype)


@importer("Tile", fold="always")
def _tile(ctx: NodeContext) -> Value:
    """Reshape to interleave size-1 dims, Broadcast them to the repeats, Reshape back."""
    x = ctx.node(0)
    repeats = ctx.ints(1, "repeats")
    if len(repeats) != x.type.rank:
        raise ShapeError(f"repeats {repeats} do not match {x.type}")
    if any(r < 0 for r in repeats):
        raise ShapeError(f"repeats {repeats} include a negative count; ONNX requires repeats >= 0")
    shape = x.type.shape
    spread = tuple(v for d in shape for v in (1, d))
    wide = tuple(v for r, d in zip(repeats, shape, strict=True) for v in (r, d))
    tiled = ctx.b.broadcast_to(ctx.b.reshape(x, spread), wide)
    return ctx.b.reshape(tiled, tuple(r * d for r, d in zip(repeats, shape, strict=True)), name=ctx.name)


@importer("DepthToSpace", "SpaceToDepth", fold="always", ranks={0: 4})
def _depth_space(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    s = ctx.int_attr("blocksize", 0, low=1)
    n, c, h, w = x.type.shape
    if ctx.op_type == "SpaceToDepth":
        split = b.Reshape(x, shape=(n, c, h // s, s, w // s, s))
        crd = ctx.attr("mode", "DCR") == "CRD"  # opset 28 adds column-row-depth order
        moved = b.Transpose(split, shuffle=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
        return b.Reshape(moved, shape=(n, c * s * s, h // s, w // s), name=ctx.name)
    if ctx.attr("mode", "DCR") == "DCR":
        split = b.Reshape(x, shape=(n, s, s, c // (s * s), h, w))
        moved = b.Transpose(split, shuffle=(0, 3, 4, 1, 5, 2))
    else:
        split = b.Reshape(x, shape=(n, c // (s * s), s, s, h, w))
        moved = b.Transpose(split, shuffle=(0, 1, 4, 2, 5, 3))
    return b.Reshape(moved, shape=(n, c // (s * s), h * s, w * s), name=ctx.name)
