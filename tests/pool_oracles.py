"""Independent float64 implementations of the pooling nodes, written from the ONNX operator
definitions window by window (a loop over output positions, each window's elements listed
explicitly), sharing no code with their lowerings (which gather windows by an index table
or call the 2-D primitives)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np


def _out_size(n: int, reach: int, stride: int, begin: int, end: int, ceil_mode: bool) -> int:
    """ONNX's output size; with ceil_mode a last window starting past the input and its begin
    pad is dropped (as onnxruntime and PyTorch do)."""
    span = n + begin + end - reach
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= n + begin:
        out -= 1
    return out


def _windows(size: Sequence[int], kernel, strides, dilations, pads, ceil_mode):
    """Output shape, and for each output position the window's positions: (input index or
    None for padding, whether the position lies in the declared pads or the input)."""
    d = len(size)
    reach = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations, strict=True)]
    out = [_out_size(size[i], reach[i], strides[i], pads[i], pads[d + i], ceil_mode) for i in range(d)]
    windows = {}
    for o in itertools.product(*(range(v) for v in out)):
        cells = []
        for k in itertools.product(*(range(v) for v in kernel)):
            where = [o[i] * strides[i] - pads[i] + k[i] * dilations[i] for i in range(d)]
            inside = all(0 <= w < size[i] for i, w in enumerate(where))
            declared = all(-pads[i] <= w < size[i] + pads[d + i] for i, w in enumerate(where))
            cells.append((tuple(where) if inside else None, declared))
        windows[o] = cells
    return out, windows


def _pool(x: np.ndarray, attrs: dict, reduce: Callable[[list[float], list[tuple]], float]) -> np.ndarray:
    n, c, *size = x.shape
    geometry = (attrs["kernel"], attrs["strides"], attrs["dilations"], attrs["pads"], attrs["ceil_mode"])
    out, windows = _windows(size, *geometry)
    y = np.zeros((n, c, *out))
    for b, ch in itertools.product(range(n), range(c)):
        for o, cells in windows.items():
            values = [x[(b, ch, *w)] for w, _ in cells if w is not None]
            y[(b, ch, *o)] = reduce(values, cells)
    return y


def max_pool(x, kernel, strides, dilations, pads, ceil_mode):
    attrs = dict(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil_mode)
    return _pool(x, attrs, lambda values, cells: max(values))


def avg_pool(x, kernel, strides, dilations, pads, ceil_mode, count_include_pad):
    attrs = dict(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil_mode)

    def mean(values, cells):
        count = sum(1 for w, declared in cells if declared) if count_include_pad else len(values)
        return sum(values) / count

    return _pool(x, attrs, mean)


def lp_pool(x, kernel, strides, dilations, pads, ceil_mode, p):
    attrs = dict(kernel=kernel, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil_mode)
    return _pool(x, attrs, lambda values, cells: sum(abs(v) ** p for v in values) ** (1.0 / p))


def max_pool_indices(x, kernel, strides, dilations, pads, ceil_mode, storage_order):
    """The flat index (N, C, then the spatial dims row-major, or column-major with
    storage_order 1) of each window's first maximum."""
    n, c, *size = x.shape
    out, windows = _windows(size, kernel, strides, dilations, pads, ceil_mode)
    y = np.zeros((n, c, *out), np.int64)
    plane = math.prod(size)
    for b, ch in itertools.product(range(n), range(c)):
        for o, cells in windows.items():
            inside = [w for w, _ in cells if w is not None]
            best = max(inside, key=lambda w: (x[(b, ch, *w)], -inside.index(w)))
            spatial = (
                np.ravel_multi_index(best[::-1], size[::-1])
                if storage_order
                else np.ravel_multi_index(best, size)
            )
            y[(b, ch, *o)] = (b * c + ch) * plane + spatial
    return y


def max_unpool(x, indices, kernel, strides, pads, output_shape):
    n, c, *size = x.shape
    d = len(size)
    inferred = [n, c] + [(s - 1) * strides[i] + kernel[i] - pads[i] - pads[d + i] for i, s in enumerate(size)]
    y = np.zeros(math.prod(inferred))
    for value, where in zip(x.reshape(-1), indices.reshape(-1).astype(np.int64), strict=True):
        y[where] = value
    result = np.zeros(output_shape or inferred)
    result[tuple(slice(0, v) for v in inferred)] = y.reshape(inferred)
    return result


POOL_ORACLES: dict[str, Callable[..., np.ndarray]] = {
    "MaxPoolNd": max_pool,
    "AvgPoolNd": avg_pool,
    "LpPool": lp_pool,
    "MaxPoolIndices": max_pool_indices,
    "GlobalMaxPool": lambda x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True),
    "GlobalAveragePool": lambda x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),
    "MaxUnpool": max_unpool,
}
"""Pooling node kind -> its float64 oracle, called with the operands and completed attributes."""
