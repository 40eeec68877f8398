"""Pooling of any rank: max, average and Lp windows with dilations, ceil_mode and explicit
pads, MaxPool's Indices, global pooling and MaxUnpool, as ONNX defines them.

The nodes keep ONNX's attributes (pads as all begins, then all ends; the importer resolves
``auto_pad`` into them), so a backend with a pooling unit can keep them whole. Lowered, a
1-D or 2-D undilated window becomes glow's 2-D MaxPool/AvgPool primitive (a 1-D one runs over
a height-1 image, the same values); every other window is gathered into a trailing axis by
a compile-time index table over the padded input and reduced (max, sum over a compile-time
divisor, or the p-norm).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from glow_core.graph.nodes.indexing import exact_constant
from glow_core.graph.nodes.pool_windows import (
    Geometry,
    gather_windows,
    out_size,
    pool_type,
    window_counts,
    window_geometry,
)
from glow_core.primitives import NUMERIC_KINDS
from glow_core.spec import Attr, In, ex, expect, node
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type


def _lowest(x: Node) -> float:
    """What a max pool pads with: -inf, or an integer kind's lowest value (-inf does not fit)."""
    return -math.inf if x.type.elem.is_float else int(np.iinfo(x.type.dtype).min)


def _two_d(x: Node, dilations: Sequence[int]) -> bool:
    """Whether glow's 2-D pooling primitives compute this window (1-D or 2-D, undilated)."""
    return x.type.rank in (3, 4) and all(d == 1 for d in dilations)


def _primitive_pool(b: Builder, x: Node, geometry: Geometry, build) -> Node:
    """A 1-D or 2-D pooling primitive: ``build(image, kernel, strides, begins, ends, extra)``
    over the NCHW image (a 1-D input as a height-1 image, reshaped back)."""
    kernel, strides, _, begin, end, extra = geometry
    if x.type.rank == 4:
        return build(x, tuple(kernel), tuple(strides), tuple(begin), tuple(end), tuple(extra))
    n, c, w = x.type.shape
    image = b.Reshape(x, shape=(n, c, 1, w))
    y = build(image, (1, *kernel), (1, *strides), (0, *begin), (0, *end), (0, *extra))
    return b.Reshape(y, shape=(n, c, y.type.shape[3]))


def _lower_max(b: Builder, x: Node, geometry: Geometry) -> Node:
    if _two_d(x, geometry[2]):

        def build(image, kernel, strides, begin, end, extra):
            pads = (*begin, *(e + o for e, o in zip(end, extra, strict=True)))
            return b.MaxPool(image, kernel=kernel, strides=strides, pads=pads)

        return _primitive_pool(b, x, geometry, build)
    windows, _ = gather_windows(b, x, geometry, _lowest(x))
    return b.Reshape(
        b.ReduceMax(windows, axes=(3,)), shape=(*x.type.shape[:2], *out_size(x.type.shape[2:], geometry))
    )


def _lower_average(b: Builder, x: Node, geometry: Geometry, include_pad: bool) -> Node:
    if _two_d(x, geometry[2]):

        def build(image, kernel, strides, begin, end, extra):
            window = {"kernel": kernel, "strides": strides}
            if not include_pad:
                pads = (*begin, *(e + o for e, o in zip(end, extra, strict=True)))
                return b.AvgPool(image, pads=pads, **window)
            if not any(extra):
                return b.AvgPool(image, pads=(*begin, *end), count_include_pad=True, **window)
            # Declared pads count in the divisor, the ceil overhang does not: pad with real
            # zeros first, then pool excluding only the overhang.
            zeros = b.Pad(image, pads=(0, 0, *begin, 0, 0, *end))
            return b.AvgPool(zeros, pads=(0, 0, *extra), **window)

        return _primitive_pool(b, x, geometry, build)
    windows, _ = gather_windows(b, x, geometry, 0.0)
    counts = window_counts(x.type.shape[2:], geometry, include_pad)
    total = b.ReduceSum(windows, axes=(3,))
    divisor = exact_constant(b, counts.reshape(1, 1, -1, 1).astype(x.type.dtype), "counts")
    out = (*x.type.shape[:2], *out_size(x.type.shape[2:], geometry))
    return b.Reshape(b.div(total, divisor), shape=out)


def _lower_lp(b: Builder, x: Node, geometry: Geometry, p: int) -> Node:
    windows, _ = gather_windows(b, x, geometry, 0.0)
    magnitude = b.Max(windows, b.Sub(b.splat(0.0, windows), windows))
    total = b.ReduceSum(b.Pow(magnitude, b.splat(float(p), windows)), axes=(3,))
    out = (*x.type.shape[:2], *out_size(x.type.shape[2:], geometry))
    return b.Reshape(b.Pow(total, b.splat(1.0 / p, total)), shape=out)


def _max_indices(b: Builder, x: Node, geometry: Geometry, column_major: bool) -> Node:
    """ONNX MaxPool Indices: the flat input index (over N, C and the spatial dims, row-major,
    or with the spatial dims column-major when ``storage_order`` is 1) of each window's first
    maximum."""
    _, _, _, begin, end, extra = geometry
    windows, table = gather_windows(b, x, geometry, _lowest(x))
    spatial = x.type.shape[2:]
    padded = [s + p + q + e for s, p, q, e in zip(spatial, begin, end, extra, strict=True)]
    coords = np.stack(np.unravel_index(table, padded), axis=-1) - np.array(begin)
    dims = spatial[::-1] if column_major else spatial
    coords = coords[..., ::-1] if column_major else coords
    clipped = np.clip(coords, 0, np.array(dims) - 1)
    source = np.ravel_multi_index(tuple(np.moveaxis(clipped, -1, 0)), dims)  # [windows, K]
    n, c, w, k = windows.type.shape
    pick = b.ArgMax(windows, axis=3)  # [N, C, W, 1]
    rows = exact_constant(b, (np.arange(w, dtype=np.int64) * k).reshape(1, 1, w, 1), "rows")
    flat = b.add(pick, rows)
    index = b.Gather(exact_constant(b, source.reshape(-1).astype(np.int64), "source"), flat, axis=0)
    base = exact_constant(
        b, (np.arange(n * c, dtype=np.int64) * math.prod(spatial)).reshape(n, c, 1, 1), "base"
    )
    out = (n, c, *out_size(spatial, geometry))
    return b.Reshape(b.add(index, base), shape=out)


def _window_attrs(kernel, strides, dilations, pads) -> tuple[Sequence[int], ...]:
    return tuple(kernel), tuple(strides), tuple(dilations), tuple(pads)


def _geometry(input, kernel, strides, dilations, pads, ceil_mode):
    """The window geometry of a pool over ``input``'s spatial dims (its lowering's view)."""
    return window_geometry(input.type.shape[2:], _window_attrs(kernel, strides, dilations, pads), ceil_mode)


class _Window:
    """What the windowed pools share: the input and ONNX's window attributes. A plain base
    class, not an operator: ``@node`` reads a declaration's bases first, so each pool keeps
    only what is its own."""

    input = In("[N, C, *spatial]")
    kernel = Attr(tuple, doc="one per spatial dim")
    strides = Attr(tuple, doc="one per spatial dim")
    dilations = Attr(tuple, doc="one per spatial dim")
    pads = Attr(tuple, doc="all begins, then all ends")
    ceil_mode = Attr(bool, False)


@node
class MaxPoolNd(_Window):
    """ONNX MaxPool's values over any number of spatial dims: the maximum of each (dilated)
    window, padding never winning; ``ceil_mode`` rounds the output size up."""

    kinds = NUMERIC_KINDS
    examples = (
        ex("f32[1,2,6,7]", kernel=(3, 2), strides=(2, 1), dilations=(1, 1), pads=(1, 0, 1, 1),
           ceil_mode=True),
        ex("f32[2,3,9]", kernel=(3,), strides=(2,), dilations=(2,), pads=(1, 2)),
        ex("f32[1,2,4,5,6]", kernel=(2, 2, 3), strides=(2, 1, 2), dilations=(1, 2, 1),
           pads=(0, 1, 1, 1, 0, 1), ceil_mode=True),
    )  # fmt: skip

    def type(input, kernel, strides, dilations, pads, ceil_mode):
        return pool_type(input, _window_attrs(kernel, strides, dilations, pads), ceil_mode)

    def lower(b, input, kernel, strides, dilations, pads, ceil_mode):
        return _lower_max(b, input, _geometry(input, kernel, strides, dilations, pads, ceil_mode))


@node
class AvgPoolNd(_Window):
    """ONNX AveragePool over any number of spatial dims: the mean of each (dilated) window;
    declared pads count in the divisor when ``count_include_pad``, the ceil_mode overhang never."""

    count_include_pad = Attr(bool, False)
    examples = (
        ex("f32[1,3,7,6]", kernel=(3, 3), strides=(2, 2), dilations=(1, 1), pads=(1, 1, 1, 0), ceil_mode=True,
           count_include_pad=True),
        ex("f32[2,2,8]", kernel=(4,), strides=(3,), dilations=(1,), pads=(2, 1)),
        ex("f32[1,2,5,4,6]", kernel=(2, 3, 2), strides=(1, 2, 2), dilations=(2, 1, 1),
           pads=(1, 1, 0, 0, 1, 1), ceil_mode=True, count_include_pad=True),
    )  # fmt: skip

    def type(input, kernel, strides, dilations, pads, ceil_mode, count_include_pad):
        expect(input.elem.is_float, "an average needs a float input", input)
        return pool_type(input, _window_attrs(kernel, strides, dilations, pads), ceil_mode)

    def lower(b, input, kernel, strides, dilations, pads, ceil_mode, count_include_pad):
        geometry = _geometry(input, kernel, strides, dilations, pads, ceil_mode)
        return _lower_average(b, input, geometry, count_include_pad)


@node
class LpPool(_Window):
    """ONNX LpPool over any number of spatial dims: the p-norm (sum of |x|^p, to the 1/p) of
    each (dilated) window; pads are zeros."""

    p = Attr(int, 2)
    examples = (
        ex("f32[1,2,5,5]", kernel=(2, 2), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0)),
        ex("f32[2,3,7]", kernel=(3,), strides=(2,), dilations=(2,), pads=(1, 1), ceil_mode=True, p=3),
    )

    def type(input, kernel, strides, dilations, pads, ceil_mode, p):
        expect(input.elem.is_float, "a p-norm needs a float input", input)
        expect(p >= 1, f"p = {p} must be >= 1", input)
        return pool_type(input, _window_attrs(kernel, strides, dilations, pads), ceil_mode)

    def lower(b, input, kernel, strides, dilations, pads, ceil_mode, p):
        geometry = _geometry(input, kernel, strides, dilations, pads, ceil_mode)
        return _lower_lp(b, input, geometry, p)


@node
class MaxPoolIndices(_Window):
    """ONNX MaxPool's second output: for each window of MaxPoolNd, the flat int64 index into
    the input of its first maximum (spatial dims column-major when ``storage_order`` is 1)."""

    storage_order = Attr(int, 0)
    kind_operand = "input"
    examples = (
        ex(
            "f32[1,2,5,6]", kernel=(2, 3), strides=(2, 2), dilations=(1, 1), pads=(1, 0, 0, 1), ceil_mode=True
        ),
        ex(
            "f32[2,1,4,5]",
            kernel=(2, 2),
            strides=(1, 2),
            dilations=(2, 1),
            pads=(0, 0, 0, 0),
            storage_order=1,
        ),
    )

    def type(input, kernel, strides, dilations, pads, ceil_mode, storage_order):
        expect(storage_order in (0, 1), f"storage_order {storage_order} must be 0 (row-major) or 1", input)
        result = pool_type(input, _window_attrs(kernel, strides, dilations, pads), ceil_mode)
        return result.with_elem(ElemKind.int64)

    def lower(b, input, kernel, strides, dilations, pads, ceil_mode, storage_order):
        geometry = _geometry(input, kernel, strides, dilations, pads, ceil_mode)
        return _max_indices(b, input, geometry, bool(storage_order))


def _global_type(input: Type) -> Type:
    expect(input.rank >= 3, "the input must be [N, C, *spatial] with at least one spatial dim", input)
    return input.with_shape((*input.shape[:2], *([1] * (input.rank - 2))))


@node
class GlobalMaxPool:
    """The maximum over every spatial dim, kept as size 1 (ONNX GlobalMaxPool)."""

    input = In("[N, C, *spatial]")
    kinds = NUMERIC_KINDS
    examples = (ex("f32[2,3,4,5]"), ex("f32[1,4,7]"), ex("f32[1,2,3,4,5]"))

    def type(input):
        return _global_type(input)

    def lower(b, input):
        return b.create("ReduceMax", input, axes=tuple(range(2, input.type.rank)))


@node
class GlobalAveragePool:
    """The mean over every spatial dim, kept as size 1 (ONNX GlobalAveragePool)."""

    input = In("[N, C, *spatial]")
    examples = (ex("f32[2,3,4,5]"), ex("f32[1,4,7]"), ex("f32[1,2,3,4,5]"))

    def type(input):
        expect(input.elem.is_float, "a mean needs a float input", input)
        return _global_type(input)

    def lower(b, input):
        return b.create("ReduceMean", input, axes=tuple(range(2, input.type.rank)))


def _unpooled_shape(input: Type, kernel, strides, pads) -> tuple[int, ...]:
    """MaxUnpool's inferred output shape: the input's MaxPool source size."""
    n, c, *size = input.shape
    d = len(size)
    return (
        n,
        c,
        *(
            (s - 1) * st + k - pads[i] - pads[i + d]
            for i, (s, st, k) in enumerate(zip(size, strides, kernel, strict=True))
        ),
    )


def _unpool_type(input: Type, indices: Type, attrs: tuple, output_shape: tuple[int, ...]) -> Type:
    kernel, strides, pads = attrs
    expect(input.rank >= 3, "the input must be [N, C, *spatial] with at least one spatial dim", input)
    expect(indices.shape == input.shape, "indices must have the input's shape", indices, input)
    expect(indices.elem is ElemKind.int64, "indices must be int64", indices)
    d = input.rank - 2
    expect(len(kernel) == d and len(strides) == d, "kernel and strides give one value per spatial dim", input)
    expect(min(kernel) >= 1 and min(strides) >= 1, "kernel and strides must be >= 1", input)
    expect(
        len(pads) == 2 * d and min(pads) >= 0,
        f"pads {list(pads)} must give {d} begins, then ends, >= 0",
        input,
    )
    inferred = _unpooled_shape(input, kernel, strides, pads)
    expect(min(inferred) >= 1, f"the unpooled shape {list(inferred)} must be positive", input)
    if not output_shape:
        return input.with_shape(inferred)
    expect(
        len(output_shape) == input.rank,
        f"output_shape {list(output_shape)} must have the input's rank",
        input,
    )
    expect(
        all(t >= s for t, s in zip(output_shape, inferred, strict=True)),
        f"output_shape {list(output_shape)} is smaller than the unpooled shape {list(inferred)}",
        input,
    )
    return input.with_shape(tuple(output_shape))


@node
class MaxUnpool:
    """ONNX MaxUnpool: zeros with each input element written at its flat index (MaxPool's
    Indices) in the unpooled shape, then zero-padded at the end up to ``output_shape``."""

    input = In("[N, C, *spatial]")
    indices = In("int64, the input's shape: flat positions in the unpooled output")
    kernel = Attr(tuple, doc="one per spatial dim")
    strides = Attr(tuple, doc="one per spatial dim")
    pads = Attr(tuple, doc="all begins, then all ends")
    output_shape = Attr(tuple, (), doc="the whole output shape; empty: the unpooled shape")
    kind_operand = "input"
    examples = (
        ex("f32[1,2,2,2]", "i64[1,2,2,2]", kernel=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0)),
        ex("f32[2,1,3]", "i64[2,1,3]", kernel=(3,), strides=(2,), pads=(1, 0), output_shape=(2, 1, 8)),
    )

    def sample(rng, input, indices, kernel, strides, pads, output_shape):
        """Distinct flat positions inside the unpooled shape (as MaxPool's Indices are), so
        no two elements race for one position."""
        inferred = _unpooled_shape(input, kernel, strides, pads)
        values = rng.standard_normal(input.shape).astype(input.dtype)
        where = rng.permutation(math.prod(inferred))[: input.size].reshape(input.shape)
        return [values, where.astype(np.int64)]

    def type(input, indices, kernel, strides, pads, output_shape):
        return _unpool_type(input, indices, (kernel, strides, pads), output_shape)

    def lower(b, input, indices, kernel, strides, pads, output_shape):
        inferred = _unpooled_shape(input.type, kernel, strides, pads)
        zeros = b.splat(0.0, input.type.with_shape((math.prod(inferred),)))
        flat = b.Reshape(indices, shape=(indices.type.size,))
        scattered = b.ScatterElements(zeros, flat, b.Reshape(input, shape=(input.type.size,)), axis=0)
        y = b.Reshape(scattered, shape=inferred)
        grow = [t - s for t, s in zip(output_shape or inferred, inferred, strict=True)]
        return b.Pad(y, pads=(0,) * len(grow) + tuple(grow)) if any(grow) else y
