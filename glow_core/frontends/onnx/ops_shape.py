"""Importers for data movement: reshapes, transposes, slicing, gathering, padding, copies.

Every shape-like operand (target shapes, axes, starts, pads) must be known at load time;
with all operands known the node is folded instead (see ``fold``), which is how exported
shape subgraphs disappear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.registry import NodeContext, Rank, Value, importer
from glow_core.graph.node import Node


def _reshaped(ctx: NodeContext, x: Node, shape: Sequence[int]) -> Node:
    """``x`` in ``shape`` (no node at all when the shape does not change)."""
    shape = tuple(int(d) for d in shape)
    if shape == x.type.shape:
        return x
    return ctx.b.Reshape(x, shape=shape, name=ctx.name)


def reshape_dims(shape: Sequence[int], target: Sequence[int], allowzero: bool) -> list[int]:
    """ONNX Reshape's target: 0 copies the input dim (unless ``allowzero``), -1 is inferred."""
    dims = [shape[i] if d == 0 and not allowzero and i < len(shape) else d for i, d in enumerate(target)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ShapeError(f"bad target shape {list(target)}")
    size = math.prod(shape)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape {list(shape)} to {list(target)}")
        dims[dims.index(-1)] = size // known
    if math.prod(dims) != size:
        raise ShapeError(f"cannot reshape {list(shape)} ({size} elements) to {list(target)}")
    return dims


@importer("Reshape", fold="always")
def _reshape(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    dims = reshape_dims(x.type.shape, ctx.ints(1, "shape"), bool(ctx.attr("allowzero", 0)))
    return _reshaped(ctx, x, dims)


@importer("Flatten", fold="always")
def _flatten(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    shape, axis = x.type.shape, int(ctx.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise ShapeError(f"axis {axis} out of range for {x.type}")
    axis = axis + len(shape) if axis < 0 else axis
    return _reshaped(ctx, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@importer("Squeeze", fold="always")
def _squeeze(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    shape = x.type.shape
    axes = ctx.ints(1, "axes") if ctx.opset >= 13 and ctx.has(1) else ctx.attr("axes", [])
    if not axes:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {ctx.axis(int(a), len(shape), f"axes {list(axes)}: axis") for a in axes}
    wide = [a for a in sorted(axes) if shape[a] != 1]
    if wide:
        raise ShapeError(f"cannot squeeze axes {wide} of {x.type}: their size is not 1")
    return _reshaped(ctx, x, [d for i, d in enumerate(shape) if i not in axes])


@importer("Unsqueeze", fold="always")
def _unsqueeze(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    axes = ctx.ints(1, "axes") if ctx.opset >= 13 else list(ctx.attr("axes", []))
    rank = x.type.rank + len(axes)
    inserted = {ctx.axis(int(a), rank, f"axes {list(axes)}: axis") for a in axes}
    if len(inserted) != len(axes):
        raise ShapeError(f"repeated axes {axes}")
    dims = iter(x.type.shape)
    return _reshaped(ctx, x, [1 if i in inserted else next(dims) for i in range(rank)])


@importer("Transpose", fold="always")
def _transpose(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    perm = tuple(int(p) for p in ctx.attr("perm", range(x.type.rank - 1, -1, -1)))
    if perm == tuple(range(x.type.rank)):
        return x
    return ctx.b.Transpose(x, shuffle=perm, name=ctx.name)


@importer("Concat", fold="always")
def _concat(ctx: NodeContext) -> Node:
    operands = [ctx.node(i) for i in range(len(ctx.proto.input)) if ctx.has(i)]
    if len(operands) == 1:
        return operands[0]
    return ctx.b.Concat(*operands, axis=int(ctx.required_attr("axis")), name=ctx.name)


def _split_sizes(ctx: NodeContext, dim: int) -> list[int]:
    """Output sizes from the split input (13+), the split attribute, num_outputs (18+), or equal."""
    count = ctx.num_outputs
    if ctx.opset >= 13 and ctx.has(1):
        sizes = ctx.ints(1, "split")
    elif ctx.opset < 13 and ctx.attr("split"):
        sizes = [int(s) for s in ctx.attr("split")]
    elif ctx.attr("num_outputs") is not None:
        chunk = math.ceil(dim / int(ctx.attr("num_outputs")))
        sizes = [chunk] * (count - 1) + [dim - chunk * (count - 1)]
    elif dim % count == 0:
        sizes = [dim // count] * count
    else:
        raise ShapeError(f"cannot split a dimension of size {dim} into {count} equal parts")
    if len(sizes) != count or sum(sizes) != dim or min(sizes) < 0:
        raise ShapeError(f"split sizes {sizes} do not divide size {dim} into {count} outputs")
    return sizes


@importer("Split", fold="always", ranks={0: Rank.at_least(1)})
def _split(ctx: NodeContext) -> list[Node]:
    """One Slice per output."""
    x = ctx.node(0)
    shape = x.type.shape
    axis = ctx.axis_attr("axis", 0, len(shape))
    outputs, start = [], 0
    for index, size in enumerate(_split_sizes(ctx, shape[axis])):
        starts, ends = [0] * len(shape), list(shape)
        starts[axis], ends[axis] = start, start + size
        name = f"{ctx.name}:{index}"
        outputs.append(ctx.b.Slice(x, starts=tuple(starts), ends=tuple(ends), name=name))
        start += size
    return outputs


def _clamp(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice bounds: negatives count from the end, then clamp by the step's sign."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice_args(ctx: NodeContext) -> tuple[list[int], list[int], list[int], list[int]]:
    """starts, ends, axes, steps: attributes before opset 10, constant inputs after."""
    if ctx.opset < 10:
        starts, ends = list(ctx.attr("starts", [])), list(ctx.attr("ends", []))
        steps = [1] * len(starts)
        axes = list(ctx.attr("axes", range(len(starts))))
    else:
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"starts {starts}, ends {ends}, axes {axes}, steps {steps} differ in length")
    return starts, ends, axes, steps


@importer("Slice", fold="always")
def _slice(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    shape = x.type.shape
    starts, ends, steps = [0] * len(shape), list(shape), [1] * len(shape)
    seen: set[int] = set()
    for start, end, axis, step in zip(*_slice_args(ctx), strict=True):
        axis = ctx.axis(axis, len(shape), "axes: axis")
        if step == 0 or axis in seen:
            raise ShapeError(f"slice step 0 or repeated axis {axis}")
        seen.add(axis)
        starts[axis], ends[axis] = _clamp(start, end, step, shape[axis])
        steps[axis] = step
    if starts == [0] * len(shape) and ends == list(shape) and steps == [1] * len(shape):
        return x
    all_unit = all(s == 1 for s in steps)
    return ctx.b.Slice(
        x, starts=tuple(starts), ends=tuple(ends), steps=None if all_unit else tuple(steps), name=ctx.name
    )


@importer("Gather", fold="always", ranks={0: Rank.at_least(1)})
def _gather(ctx: NodeContext) -> Node:
    data = ctx.node(0)
    axis = ctx.axis_attr("axis", 0, data.type.rank)
    if ctx.is_static(1):
        indices, size = ctx.static(1, "indices"), data.type.shape[axis]
        if indices.size and (indices.min() < -size or indices.max() >= size):
            raise ShapeError(f"indices {indices.tolist()} out of range for size {size} on axis {axis}")
    return ctx.b.Gather(data, ctx.node(1), axis=axis, name=ctx.name)


def _full_pads(ctx: NodeContext, rank: int, pads: list[int], axes: list[int]) -> list[int]:
    """Pads over every dim (begins then ends) from pads over ``axes`` (opset 18)."""
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"pads {pads} need two entries per padded axis ({len(axes)} axes)")
    full = [0] * (2 * rank)
    for index, axis in enumerate(axes):
        axis = ctx.axis(axis, rank, f"axes {axes}: axis")
        full[axis], full[axis + rank] = pads[index], pads[index + len(axes)]
    return full


@importer("Pad", fold="always")
def _pad(ctx: NodeContext) -> Node:
    """Constant padding; negative pads crop, done by a Slice after the Pad."""
    x = ctx.node(0)
    rank, mode = x.type.rank, ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.refuse(f"mode {mode!r} is not one of constant, reflect, edge, wrap")
    if ctx.opset < 11:
        pads, value = [int(p) for p in ctx.attr("pads", [])], ctx.attr("value", 0.0)
    else:
        pads = ctx.ints(1, "pads")
        value = ctx.scalar(2, "constant_value") if ctx.has(2) else 0
    axes = ctx.ints(3, "axes") if ctx.opset >= 18 and ctx.has(3) else list(range(rank))
    full = _full_pads(ctx, rank, pads, axes)
    if mode != "constant":
        return _pad_by_gather(ctx, x, full, mode)
    crop = any(p < 0 for p in full)
    y = x
    if any(p > 0 for p in full):
        value = float(value) if x.type.elem.is_float else int(value)
        y = ctx.b.Pad(x, pads=tuple(max(p, 0) for p in full), value=value, name=None if crop else ctx.name)
    if not crop:
        return y
    starts = [max(-p, 0) for p in full[:rank]]
    ends = [d - max(-p, 0) for d, p in zip(y.type.shape, full[rank:], strict=True)]
    if any(e < s for s, e in zip(starts, ends, strict=True)):
        raise ShapeError(f"negative pads {full} crop more than {x.type} holds")
    return ctx.b.Slice(y, starts=tuple(starts), ends=tuple(ends), name=ctx.name)


def _source_positions(mode: str, size: int, before: int, after: int) -> np.ndarray:
    """For each padded position, the input position it copies (reflect, edge or wrap)."""
    positions = np.arange(-before, size + after)
    if mode == "edge":
        return np.clip(positions, 0, size - 1)
    if mode == "wrap":
        return positions % size
    if size == 1:
        return np.zeros_like(positions)
    period = 2 * (size - 1)  # reflect: mirror about the edges without repeating them
    folded = positions % period
    return np.where(folded < size, folded, period - folded)


def _pad_by_gather(ctx: NodeContext, x: Node, pads: list[int], mode: str) -> Node:
    """Non-constant padding: one Gather per padded axis at load-time source positions."""
    rank = x.type.rank
    for axis in range(rank):
        before, after = pads[axis], pads[axis + rank]
        if before == after == 0:
            continue
        index = _source_positions(mode, x.type.shape[axis], before, after).astype(np.int64)
        x = ctx.b.Gather(x, ctx.constant(index, f"pad{axis}"), axis=axis)
    return x


@importer("CenterCropPad", fold="always", ranks={1: 1})
def _center_crop_pad(ctx: NodeContext) -> Node:
    """A centred Slice where the target is smaller, a centred zero Pad where it is larger."""
    x = ctx.node(0)
    rank = x.type.rank
    given = [int(a) for a in ctx.attr("axes", range(rank))]
    axes = [ctx.axis(a, rank, f"attribute 'axes' = {given}: axis") for a in given]
    shape = ctx.ints(1, "shape")
    if len(shape) != len(axes) or min(shape, default=0) < 0 or len(set(axes)) != len(axes):
        raise ShapeError(
            f"shape {shape} must hold one size >= 0 per axis of {given} (distinct axes of {x.type})"
        )
    target = list(x.type.shape)
    for axis, size in zip(axes, shape, strict=True):
        target[axis] = size
    starts = [max(d - t, 0) // 2 for d, t in zip(x.type.shape, target, strict=True)]
    ends = [s + min(d, t) for s, d, t in zip(starts, x.type.shape, target, strict=True)]
    if starts != [0] * rank or ends != list(x.type.shape):
        x = ctx.b.Slice(x, starts=tuple(starts), ends=tuple(ends))
    grow = [max(t - d, 0) for d, t in zip(x.type.shape, target, strict=True)]
    if any(grow):  # an odd extra pixel goes to the end
        x = ctx.b.Pad(x, pads=tuple(g // 2 for g in grow) + tuple(g - g // 2 for g in grow))
    return x


@importer("Expand", fold="always")
def _expand(ctx: NodeContext) -> Node:
    """Bidirectional broadcast: the result shape is broadcast(input shape, shape)."""
    x = ctx.node(0)
    target = ctx.ints(1, "shape")
    try:
        shape = np.broadcast_shapes(x.type.shape, tuple(target))
    except ValueError:
        raise ShapeError(f"{x.type} does not broadcast to {target}") from None
    return ctx.b.broadcast_to(x, shape)


@importer("Identity")
def _identity(ctx: NodeContext) -> Value:
    return ctx.value(0)


@importer("Dropout")
def _dropout(ctx: NodeContext) -> list[Value | None]:
    """Inference dropout (or training with ratio 0) is the identity; its mask, when used, is all true."""
    if ctx.opset >= 12 and ctx.has(2) and ctx.scalar(2, "training_mode"):
        ratio = float(ctx.scalar(1, "ratio")) if ctx.has(1) else 0.5
        if ratio != 0.0:
            raise ctx.refuse(
                "training_mode=true is not supported (random masks); export the model in eval mode"
            )
    mask = np.ones(ctx.shape(0), dtype=bool) if ctx.output_requested(1) else None
    return [ctx.value(0), mask]
