"""Data-dependent indexing: ArgMax, TopK (indices), ScatterElements.

Gathers of any form (GatherElements, GatherND, Resize's nearest pick, one-hot) lower to the
core ``Gather`` on a flattened tensor; what cannot be a gather is here: positions chosen by
comparing values (ArgMax, TopK) and writes to data-dependent positions (ScatterElements,
which ScatterND lowers to as well). Values of TopK are a gather of its indices, so the
primitive has one result like every other.
"""

from __future__ import annotations

import numpy as np

from glow_core.primitives.kinds import INDEX_KINDS, NUMERIC_KINDS, VALUE_KINDS, clamped_index
from glow_core.spec import Attr, In, ex, expect, normalize_axis, primitive, random_tensor
from glow_core.types import ElemKind, Type


@primitive
class ArgMax:
    """int64 index of the largest element along ``axis`` (kept with size 1); first or last tie wins."""

    input = In()
    axis = Attr(int, 0)
    select_last = Attr(bool, False)
    core = True
    kinds = NUMERIC_KINDS
    kind_operand = "input"  # the result is always int64: kernels are chosen by what is read
    examples = (
        ex("f32[4,5]", axis=1),
        ex("f32[2,3,4]", axis=0, select_last=True),
        ex("i32[3,6]", axis=-1),
        ex("f32[7]"),
    )

    def type(input, axis, select_last):
        expect(input.rank >= 1, "argmax needs at least one dimension", input)
        axis = normalize_axis(axis, input.rank, input)
        shape = tuple(1 if i == axis else d for i, d in enumerate(input.shape))
        expect(input.shape[axis] > 0, "argmax of an empty axis", input)
        return Type(shape, ElemKind.int64)

    def sample(rng, input, axis, select_last):
        # Few distinct values, so ties (where select_last matters) occur.
        return [rng.integers(-3, 3, input.shape).astype(input.dtype)]

    def reference(input, axis, select_last):
        axis = axis % input.ndim
        if select_last:
            flipped = np.flip(input, axis)
            index = input.shape[axis] - 1 - np.argmax(flipped, axis=axis)
        else:
            index = np.argmax(input, axis=axis)
        return np.expand_dims(index, axis).astype(np.int64)


@primitive
class TopK:
    """int64 indices of the ``k`` largest (or smallest) elements along ``axis``, best first.

    Equal values keep their order (the lower index first), as ONNX TopK requires. NaN is
    above every number, as numpy sorts it (and onnxruntime and onnx.reference rank it): the
    first of the largest, the last of the smallest.
    """

    input = In()
    k = Attr(int)
    axis = Attr(int, -1)
    largest = Attr(bool, True)
    kinds = NUMERIC_KINDS
    kind_operand = "input"  # the result is always int64: kernels are chosen by what is read
    examples = (
        ex("f32[3,8]", k=3),
        ex("f32[5,4]", k=2, axis=0, largest=False),
        ex("i64[2,6]", k=6),
        ex("f32[9]", k=1),
    )

    def type(input, k, axis, largest):
        expect(input.rank >= 1, "topk needs at least one dimension", input)
        axis = normalize_axis(axis, input.rank, input)
        expect(0 <= k <= input.shape[axis], f"k={k} out of range for axis {axis}", input)
        shape = tuple(k if i == axis else d for i, d in enumerate(input.shape))
        return Type(shape, ElemKind.int64)

    def sample(rng, input, k, axis, largest):
        return [rng.integers(-4, 4, input.shape).astype(input.dtype)]

    def reference(input, k, axis, largest):
        axis = axis % input.ndim
        if input.dtype.kind in "iu":
            # Integers keep their own kind (float64 would merge large int64/uint64 values);
            # ~x reverses their order exactly and never overflows, unlike -x.
            keys = ~input if largest else input
        else:
            keys = -input.astype(np.float64) if largest else input.astype(np.float64)
        order = np.argsort(keys, axis=axis, kind="stable")  # NaN last, in index order
        if largest and input.dtype.kind not in "iu":  # NaN first: a second stable sort
            nan_last = ~np.isnan(np.take_along_axis(keys, order, axis=axis))
            order = np.take_along_axis(order, np.argsort(nan_last, axis=axis, kind="stable"), axis=axis)
        return np.take(order, np.arange(k), axis=axis).astype(np.int64)


_REDUCTIONS = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


@primitive
class ScatterElements:
    """``data`` with ``updates`` written at ``indices`` along ``axis`` (ONNX ScatterElements).

    ``reduction`` none overwrites (the last duplicate wins); add, mul, max, min combine with
    the value already there. Negative indices count from the end; out of range ones are
    clamped (``kinds.clamped_index``), as the backends' generated code does.
    """

    data = In()
    indices = In()
    updates = In()
    axis = Attr(int, 0)
    reduction = Attr(str, "none")
    core = True
    kinds = VALUE_KINDS
    examples = (
        ex("f32[4,5]", "i64[2,5]", "f32[2,5]"),
        ex("f32[3,6]", "i32[3,2]", "f32[3,2]", axis=1, reduction="add"),
        ex("i64[5]", "i64[3]", "i64[3]", reduction="max"),
        ex("f32[2,3,4]", "i64[2,3,2]", "f32[2,3,2]", axis=-1, reduction="mul"),
    )

    def type(data, indices, updates, axis, reduction):
        expect(indices.elem in INDEX_KINDS, "indices must be int32 or int64", indices)
        expect(reduction == "none" or reduction in _REDUCTIONS, f"unknown reduction {reduction!r}")
        expect(indices.shape == updates.shape, "indices and updates differ in shape", indices, updates)
        expect(updates.elem == data.elem, "updates and data differ in element kind", updates, data)
        expect(indices.rank == data.rank, "indices must have the rank of data", indices, data)
        axis = normalize_axis(axis, data.rank, data)
        fits = all(
            i <= d for a, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if a != axis
        )
        expect(fits, "indices are larger than data outside the scatter axis", indices, data)
        empty = data.shape[axis] == 0 and indices.size > 0
        expect(not empty, f"scatters into the empty axis {axis}", indices, data)
        return data

    def sample(rng, data, indices, updates, axis, reduction):
        n = data.shape[axis % data.rank]
        index = rng.integers(-n, n, indices.shape).astype(indices.dtype)
        return [random_tensor(rng, data), index, random_tensor(rng, updates)]

    def reference(data, indices, updates, axis, reduction):
        axis = axis % data.ndim
        out = data.copy()
        coords = list(np.indices(indices.shape, sparse=False))
        coords[axis] = clamped_index(indices, data.shape[axis])
        flat = np.ravel_multi_index(tuple(c.reshape(-1) for c in coords), data.shape)
        values = updates.reshape(-1)
        if reduction == "none":
            out.reshape(-1)[flat] = values
        else:
            view = out.reshape(-1)
            _REDUCTIONS[reduction].at(view, flat, values)
        return out
