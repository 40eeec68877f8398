"""Window geometry shared by the pooling nodes' type rules and lowerings: ONNX's SAME pads,
ceil_mode as an end overhang, output sizes, and the compile-time table of each window's
positions that the general lowering gathers by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from glow_core.errors import ShapeError
from glow_core.graph.nodes.indexing import exact_constant
from glow_core.spec import expect

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

Geometry = tuple[list[int], list[int], list[int], list[int], list[int], list[int]]
"""(kernel, strides, dilations, pad begins, pad ends, ceil overhang at the ends), per spatial dim."""


def same_pads(size: Sequence[int], window: tuple[Sequence[int], ...], upper: bool) -> list[int]:
    """ONNX ``auto_pad`` SAME_UPPER/SAME_LOWER as explicit pads (all begins, then all ends):
    the output has ceil(size / stride) elements, the odd pad element at the end (UPPER) or the
    beginning (LOWER). ``window`` is (kernel, strides, dilations)."""
    kernel, strides, dilations = window
    total = [
        max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
        for n, k, s, d in zip(size, kernel, strides, dilations, strict=True)
    ]
    small, large = [t // 2 for t in total], [t - t // 2 for t in total]
    return small + large if upper else large + small


def window_reach(kernel: Sequence[int], dilations: Sequence[int]) -> list[int]:
    return [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]


def window_geometry(size: Sequence[int], attrs: tuple[Sequence[int], ...], ceil_mode: bool) -> Geometry:
    """The window geometry with ceil_mode resolved into extra end padding (the overhang).

    As onnxruntime (and PyTorch) do, a last window that would start past the input and its
    leading pad is dropped, so every window still covers a real element or a pad.
    """
    kernel, strides, dilations, pads = (list(a) for a in attrs)
    d = len(size)
    begin, end = pads[:d], pads[d:]
    extra = [0] * d
    if ceil_mode:
        for i, (n, r, s) in enumerate(zip(size, window_reach(kernel, dilations), strides, strict=True)):
            out = math.ceil((n + begin[i] + end[i] - r) / s) + 1
            if (out - 1) * s >= n + begin[i]:
                out -= 1
            extra[i] = max((out - 1) * s + r - (n + begin[i] + end[i]), 0)
    return kernel, strides, dilations, begin, end, extra


def pool_type(input: Type, attrs: tuple[Sequence[int], ...], ceil_mode: bool) -> Type:
    """[N, C, *out] for a window over every spatial dim of ``input``, attributes checked."""
    kernel, strides, dilations, pads = attrs
    expect(input.rank >= 3, "the input must be [N, C, *spatial] with at least one spatial dim", input)
    expect(not input.elem.is_narrow, "narrow kinds are only cast, never pooled", input)
    d = input.rank - 2
    for name, values in {"kernel": kernel, "strides": strides, "dilations": dilations}.items():
        expect(len(values) == d, f"{name} {list(values)} must give one value per spatial dim ({d})", input)
        expect(min(values) >= 1, f"{name} {list(values)} must all be >= 1", input)
    expect(len(pads) == 2 * d, f"pads {list(pads)} must give all {d} begins, then all ends", input)
    extent = window_reach(kernel, dilations)
    expect(
        min(pads) >= 0 and all(p < extent[i % d] for i, p in enumerate(pads)),
        f"pads {list(pads)} must be >= 0 and smaller than the window {extent} (a window wholly in "
        "padding has no element)",
        input,
    )
    geometry = window_geometry(input.shape[2:], attrs, ceil_mode)
    out = out_size(input.shape[2:], geometry)
    expect(min(out, default=1) >= 1, f"window {extent} is larger than the padded input", input)
    return input.with_shape((*input.shape[:2], *out))


def out_size(size: Sequence[int], geometry: Geometry) -> tuple[int, ...]:
    kernel, strides, dilations, begin, end, extra = geometry
    padded = [n + p + q + e for n, p, q, e in zip(size, begin, end, extra, strict=True)]
    return tuple(
        (p - r) // s + 1 for p, r, s in zip(padded, window_reach(kernel, dilations), strides, strict=True)
    )


def window_table(padded: Sequence[int], kernel, strides, dilations) -> np.ndarray:
    """[windows, K] flat positions (in the padded spatial grid) of each window's elements."""
    extent = window_reach(kernel, dilations)
    out = tuple((p - r) // s + 1 for p, r, s in zip(padded, extent, strides, strict=True))
    if min(out) < 1:
        raise ShapeError(f"window {list(kernel)} is larger than the padded input {list(padded)}")
    starts = np.stack([g.reshape(-1) for g in np.indices(out)], axis=1) * np.array(strides)
    offsets = np.stack([g.reshape(-1) for g in np.indices(kernel)], axis=1) * np.array(dilations)
    coords = starts[:, None, :] + offsets[None, :, :]  # [windows, K, dims]
    return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), padded).astype(np.int64)


def gather_windows(b: Builder, x: Node, geometry: Geometry, fill: float) -> tuple[Node, np.ndarray]:
    """x's windows as [N, C, windows, K], and the index table."""
    kernel, strides, dilations, begin, end, extra = geometry
    n, c = x.type.shape[:2]
    tail = [e + x_ for e, x_ in zip(end, extra, strict=True)]
    if any(begin) or any(tail):
        x = b.Pad(x, pads=(0, 0, *begin, 0, 0, *tail), value=fill)
    padded = x.type.shape[2:]
    table = window_table(padded, kernel, strides, dilations)
    flat = b.Reshape(x, shape=(n, c, math.prod(padded)))
    return b.Gather(flat, exact_constant(b, table, "windows"), axis=2), table


def window_counts(size: Sequence[int], geometry: Geometry, include_pad: bool) -> np.ndarray:
    """Per window, how many elements count in an average (real ones, plus declared pads if asked)."""
    kernel, strides, dilations, begin, end, extra = geometry
    ones = np.pad(
        np.ones(size),
        list(zip(begin, end, strict=True)),
        constant_values=1.0 if include_pad else 0.0,
    )
    ones = np.pad(ones, [(0, e) for e in extra], constant_values=0.0)
    table = window_table(ones.shape, kernel, strides, dilations)
    return ones.reshape(-1)[table].sum(axis=1)
