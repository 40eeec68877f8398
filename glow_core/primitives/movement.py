"""Tensor creation and data movement: Splat, Broadcast, Reshape, Transpose, Slice, Concat, Pad, Gather, Convert."""

from __future__ import annotations

import math

import numpy as np

from glow_core.primitives.kinds import INDEX_KINDS, NUMERIC_KINDS, VALUE_KINDS, clamped_index
from glow_core.spec import Attr, In, ex, expect, normalize_axis, primitive, random_tensor
from glow_core.types import ElemKind, Type

# ---- tensor creation and data movement ------------------------------------------------


@primitive
class Splat:
    """A tensor of ``shape`` filled with one ``value`` (Glow's Splat): no operands."""

    shape = Attr(tuple)
    value = Attr((int, float, bool))
    elem = Attr(str, "float32")
    core = True
    kinds = VALUE_KINDS
    examples = (ex(shape=(3, 5), value=1.5), ex(shape=(), value=-2.0))

    def type(shape, value, elem):
        kind = ElemKind.parse(elem)
        if kind.dtype.kind in "iu":  # the generated code would wrap a value that does not fit
            info = np.iinfo(kind.dtype)
            fits = math.isfinite(value) and info.min <= value <= info.max
            expect(fits, f"value {value} does not fit {kind.name} ({info.min} to {info.max})")
        return Type(shape, kind)

    def reference(shape, value, elem):
        return np.full(shape, value, dtype=ElemKind.parse(elem).dtype)


@primitive
class Broadcast:
    """Repeat size-1 (or missing leading) dimensions of ``input`` up to ``shape`` (numpy rules)."""

    input = In()
    shape = Attr(tuple)
    core = True
    kinds = VALUE_KINDS
    examples = (ex("f32[1,5]", shape=(4, 5)), ex("f32[3,1,1]", shape=(2, 3, 4, 6)), ex("f32[]", shape=(7,)))

    def type(input, shape):
        expect(len(shape) >= input.rank, f"cannot broadcast to fewer dimensions {shape}", input)
        tail = shape[len(shape) - input.rank :]
        ok = all(d in (1, s) for d, s in zip(input.shape, tail, strict=True))
        expect(ok, f"dimensions not broadcastable to {shape}", input)
        return input.with_shape(shape)

    def reference(input, shape):
        return np.broadcast_to(input, shape).copy()

    def grad(b, node, out_grad):
        # Sum over the axes the broadcast repeated (leading new ones and size-1 ones), then
        # drop the leading ones: the "reduce over broadcast axes" of every broadcasting op.
        src, dst = node.input.type.shape, node.shape
        lead = len(dst) - len(src)
        axes = tuple(i for i, d in enumerate(dst) if i < lead or (src[i - lead] == 1 and d != 1))
        summed = b.ReduceSum(out_grad, axes=axes) if axes else out_grad
        return (summed if summed.type.shape == src else b.Reshape(summed, shape=src),)


@primitive
class Reshape:
    """The same elements in another shape; IRGen makes it a view, never a copy."""

    input = In()
    shape = Attr(tuple)
    view = True
    kinds = VALUE_KINDS
    examples = (ex("f32[4,6]", shape=(2, 12)), ex("f32[2,3,4]", shape=(24,)))

    def type(input, shape):
        expect(all(d >= 0 for d in shape), f"reshape target {shape} has negative dims", input)
        expect(math.prod(shape) == input.size, f"cannot reshape to {shape}", input)
        return input.with_shape(shape)

    def reference(input, shape):
        return input.reshape(shape)

    def grad(b, node, out_grad):
        return (b.Reshape(out_grad, shape=node.input.type.shape),)


@primitive
class Transpose:
    """Permute dimensions: result dim ``i`` is input dim ``shuffle[i]``."""

    input = In()
    shuffle = Attr(tuple)
    core = True
    kinds = VALUE_KINDS
    examples = (ex("f32[4,5]", shuffle=(1, 0)), ex("f32[2,3,4,5]", shuffle=(0, 2, 3, 1)))

    def type(input, shuffle):
        expect(sorted(shuffle) == list(range(input.rank)), f"bad shuffle {shuffle}", input)
        return input.with_shape(tuple(input.shape[i] for i in shuffle))

    def reference(input, shuffle):
        return np.transpose(input, shuffle).copy()

    def grad(b, node, out_grad):
        inverse = tuple(sorted(range(len(node.shuffle)), key=lambda d: node.shuffle[d]))
        return (b.Transpose(out_grad, shuffle=inverse),)


@primitive
class Slice:
    """Elements ``starts[i]:ends[i]:steps[i]`` along every dimension (bounds already clamped)."""

    input = In()
    starts = Attr(tuple)
    ends = Attr(tuple)
    steps = Attr(tuple, None)
    core = True
    kinds = VALUE_KINDS
    examples = (
        ex("f32[6,7]", starts=(1, 2), ends=(5, 7)),
        ex("f32[10]", starts=(9,), ends=(0,), steps=(-2,)),
        # Steps that differ per axis, one negative, to the front of its axis (end -1).
        ex("f32[6,7]", starts=(5, 1), ends=(-1, 7), steps=(-2, 3)),
    )

    def type(input, starts, ends, steps):
        steps = steps or (1,) * input.rank
        expect(len(starts) == len(ends) == len(steps) == input.rank, "slice needs one range per dim", input)
        dims = []
        for d, s, e, st in zip(input.shape, starts, ends, steps, strict=True):
            # Bounds are clamped like ONNX does before they get here: for a positive step
            # 0 <= start, end <= d; for a negative step -1 <= start, end <= d - 1, where -1
            # means "past the front" (so the reference never meets Python's negative indexing).
            expect(st != 0, "slice step must not be 0", input)
            if st > 0:
                ok = 0 <= s <= d and 0 <= e <= d
            else:
                ok = (0 <= s <= d - 1 and -1 <= e <= d - 1) or (d == 0 and s == e == -1)
            expect(ok, f"range {s}:{e}:{st} out of bounds for size {d}", input)
            dims.append(len(range(s, e, st)))
        return input.with_shape(tuple(dims))

    def reference(input, starts, ends, steps):
        steps = steps or (1,) * input.ndim
        index = tuple(
            slice(s if s >= 0 else None, e if e >= 0 else None, st)
            for s, e, st in zip(starts, ends, steps, strict=True)
        )
        return input[index].copy()

    def grad(b, node, out_grad):
        return (_unslice(b, out_grad, node.input.type.shape, node.starts, node.steps),)


@primitive
class Concat:
    """Join ``inputs`` along ``axis``; all other dimensions agree."""

    inputs = In(variadic=True)
    axis = Attr(int)
    core = True
    kinds = VALUE_KINDS
    examples = (ex("f32[2,3]", "f32[2,5]", axis=1), ex("f32[1,4]", "f32[3,4]", "f32[2,4]", axis=0))

    def type(inputs, axis):
        expect(len(inputs) >= 1, "concat needs at least one input")
        first = inputs[0]
        expect(first.rank >= 1, "cannot concatenate rank-0 tensors", *inputs)
        axis = normalize_axis(axis, first.rank, first)
        for t in inputs[1:]:
            same = t.elem == first.elem and t.rank == first.rank
            same = same and all(
                a == b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
            )
            expect(same, f"inputs disagree outside axis {axis}", *inputs)
        dims = list(first.shape)
        dims[axis] = sum(t.shape[axis] for t in inputs)
        return first.with_shape(tuple(dims))

    def reference(inputs, axis):
        return np.concatenate(inputs, axis=axis)

    def grad(b, node, out_grad):
        # Each operand gets back its own slab of the gradient along ``axis``.
        shape = out_grad.type.shape
        axis = node.axis % len(shape)
        grads, offset = [], 0
        for part in node.inputs:
            width = part.type.shape[axis]
            starts = tuple(offset if d == axis else 0 for d in range(len(shape)))
            ends = tuple(offset + width if d == axis else n for d, n in enumerate(shape))
            grads.append(b.Slice(out_grad, starts=starts, ends=ends))
            offset += width
        return grads


@primitive
class Pad:
    """Constant padding: ``pads`` holds all begins then all ends (ONNX order)."""

    input = In()
    pads = Attr(tuple)
    value = Attr((int, float), 0.0)
    core = True
    kinds = NUMERIC_KINDS
    examples = (
        ex("f32[2,3]", pads=(1, 0, 2, 3)),
        ex("f32[1,2,4,4]", pads=(0, 0, 1, 1, 0, 0, 1, 1), value=-1.0),
    )

    def type(input, pads, value):
        expect(len(pads) == 2 * input.rank, f"pads {pads} need two entries per dim", input)
        expect(all(p >= 0 for p in pads), f"negative pads {pads} (use Slice)", input)
        r = input.rank
        return input.with_shape(tuple(d + pads[i] + pads[i + r] for i, d in enumerate(input.shape)))

    def reference(input, pads, value):
        r = input.ndim
        return np.pad(input, [(pads[i], pads[i + r]) for i in range(r)], constant_values=value)

    def grad(b, node, out_grad):
        # The padding is constant: the gradient is the slab the input occupies.
        r, shape = node.input.type.rank, node.input.type.shape
        starts = node.pads[:r]
        return (
            b.Slice(out_grad, starts=starts, ends=tuple(s + d for s, d in zip(starts, shape, strict=True))),
        )


@primitive
class Gather:
    """Take slices of ``data`` along ``axis`` at ``indices`` (negative indices count back; out
    of range ones are clamped: ``kinds.clamped_index``)."""

    data = In()
    indices = In()
    axis = Attr(int, 0)
    core = True
    kinds = VALUE_KINDS
    examples = (ex("f32[5,4]", "i64[3]"), ex("f32[3,6]", "i32[2,2]", axis=1), ex("f32[4,3]", "i64[]"))

    def type(data, indices, axis):
        expect(indices.elem in INDEX_KINDS, "indices must be int32 or int64", indices)
        axis = normalize_axis(axis, data.rank, data)
        expect(data.shape[axis] > 0 or indices.size == 0, f"gathers from the empty axis {axis}", data)
        return data.with_shape(data.shape[:axis] + indices.shape + data.shape[axis + 1 :])

    def sample(rng, data, indices, axis):
        n = data.shape[axis % data.rank]
        return [random_tensor(rng, data), rng.integers(-n, n, indices.shape).astype(indices.dtype)]

    def reference(data, indices, axis):
        axis = axis % data.ndim
        return np.take(data, clamped_index(indices, data.shape[axis]), axis=axis)

    def grad(b, node, out_grad):
        # A scatter-add of the gradient rows to the rows they were read from, over
        # [outer, rows, inner] views so that one ScatterElements along axis 1 does it.
        data, indices = node.data.type, node.indices.type
        axis = node.axis % data.rank
        outer, inner = math.prod(data.shape[:axis]), math.prod(data.shape[axis + 1 :])
        picks = (outer, indices.size, inner)
        where = b.Broadcast(b.Reshape(node.indices, shape=(1, indices.size, 1)), shape=picks)
        zeros = b.Splat(shape=(outer, data.shape[axis], inner), value=0.0, elem=data.elem.name)
        rows = b.ScatterElements(zeros, where, b.Reshape(out_grad, shape=picks), axis=1, reduction="add")
        return b.Reshape(rows, shape=data.shape), None


@primitive
class Convert:
    """Change the element kind (float <-> int truncates toward zero, as ONNX Cast)."""

    input = In()
    elem = Attr(str)
    core = True
    kinds = VALUE_KINDS
    examples = (ex("f32[4,5]", elem="int32"), ex("i64[7]", elem="float32"))

    def type(input, elem):
        target = ElemKind.parse(elem)
        narrow = ", ".join(k.name for k in (input.elem, target) if k.is_narrow)
        # A byte of float8 or int4 is not a number a kernel can convert: those conversions
        # are tables over the uint8 bits (glow_core.narrow), built by the frontends.
        expect(not narrow, f"{narrow} is a storage kind: convert it through BitCast to uint8", input)
        return input.with_elem(target)

    def reference(input, elem):
        return input.astype(ElemKind.parse(elem).dtype)

    def grad(b, node, out_grad):
        source = node.input.type.elem
        if not (source.is_float and out_grad.type.elem.is_float):
            return (None,)  # to or from an integer: piecewise constant
        return (b.Convert(out_grad, elem=source.name),)


def _unslice(b, out_grad, shape: tuple[int, ...], starts: tuple[int, ...], steps: tuple[int, ...] | None):
    """Slice's gradient: ``out_grad`` put back at the positions the slice read, zeros
    elsewhere. Negative steps are reversed first (the same positions, read upwards), steps
    larger than 1 become zeros between elements, then the result is padded into place."""
    rank = len(shape)
    steps = steps or (1,) * rank
    counts = out_grad.type.shape
    if 0 in counts:
        return b.Splat(shape=shape, value=0.0, elem=out_grad.type.elem.name)
    grad = out_grad
    if any(st < 0 for st in steps):
        grad = b.Slice(
            grad,
            starts=tuple(k - 1 if st < 0 else 0 for k, st in zip(counts, steps, strict=True)),
            ends=tuple(-1 if st < 0 else k for k, st in zip(counts, steps, strict=True)),
            steps=tuple(-1 if st < 0 else 1 for st in steps),
        )
    stride = tuple(abs(st) for st in steps)
    if any(st > 1 for st in stride):
        cells = tuple(d for k in counts for d in (k, 1))
        padded = b.Pad(
            b.Reshape(grad, shape=cells),
            pads=(0,) * (2 * rank) + tuple(d for st in stride for d in (0, st - 1)),
        )
        spread = b.Reshape(padded, shape=tuple(k * st for k, st in zip(counts, stride, strict=True)))
        spans = tuple((k - 1) * st + 1 for k, st in zip(counts, stride, strict=True))
        grad = b.Slice(spread, starts=(0,) * rank, ends=spans)
    # The lowest position read along each axis: the start, or the last element of a
    # backwards slice.
    low = tuple(s if st > 0 else s + (k - 1) * st for s, k, st in zip(starts, counts, steps, strict=True))
    high = tuple(d - lo - g for d, lo, g in zip(shape, low, grad.type.shape, strict=True))
    if any(low) or any(high):
        grad = b.Pad(grad, pads=low + high)
    return grad
