"""Importers for Resize and Upsample: separable resampling with load-time weights.

Resizing is separable, so each resized axis is one 1-D operation whose weights depend
only on static shapes and attributes. Those weights are computed here, once, as a dense
[out, in] matrix following the ONNX definition (coordinate transform, neighbour choice,
edge clamping, exclude_outside, antialias); the graph then applies it as a MatMul along
the axis. Nearest resizing is a Gather instead, which is exact for every element kind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.limits import current_limits


@dataclass(frozen=True)
class _Mode:
    """The attributes that shape the 1-D weights."""

    mode: str = "nearest"
    coordinates: str = "half_pixel"
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0


def _source_coordinates(m: _Mode, out: int, size: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """Where each output position samples the input (may lie outside [0, size - 1])."""
    y = np.arange(out, dtype=np.float64)
    exact = scale * size
    if m.coordinates == "align_corners":
        return np.zeros(out) if exact == 1 else y * (size - 1) / (exact - 1)
    if m.coordinates == "asymmetric":
        return y / scale
    if m.coordinates == "tf_crop_and_resize":
        start, end = roi
        if exact == 1:
            return np.full(out, (end - start) * (size - 1) / 2) + start * (size - 1)
        return y * (end - start) * (size - 1) / (exact - 1) + start * (size - 1)
    if m.coordinates == "pytorch_half_pixel":
        return np.full(out, -0.5) if exact == 1 else (y + 0.5) / scale - 0.5
    if m.coordinates == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if m.coordinates == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / exact)
        return offset + (y + 0.5) / scale - 0.5
    raise ShapeError(f"coordinate_transformation_mode {m.coordinates!r} is not an ONNX mode")


def _coefficients(m: _Mode, ratio: float, scale: float) -> np.ndarray:
    """Weights of the neighbours of a sample at fractional offset ``ratio`` (1 when on a point)."""
    if m.mode == "nearest":
        if ratio == 1.0 or m.nearest == "ceil":
            return np.array([0.0, 1.0])
        pick_high = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False}
        if m.nearest not in pick_high:
            raise ShapeError(f"nearest_mode {m.nearest!r} is not an ONNX mode")
        high = pick_high[m.nearest]
        return np.array([0.0 if high else 1.0, 1.0 if high else 0.0])
    if m.mode == "linear":
        if not m.antialias:
            return np.array([1.0 - ratio, ratio])
        s = min(scale, 1.0)
        start = math.floor(-1 / s) + 1
        args = (np.arange(start, 2 - start) - ratio) * s
        weights = np.clip(1 - np.abs(args), 0, 1)
        return weights / weights.sum()
    a = m.cubic_a
    if not m.antialias:
        r, q = ratio, 1 - ratio
        return np.array(
            [
                ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                ((a + 2) * r - (a + 3)) * r * r + 1,
                ((a + 2) * q - (a + 3)) * q * q + 1,
                ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a,
            ]
        )
    s = min(scale, 1.0)
    start = math.floor(-2 / s) + 1
    x = np.abs(s * (np.arange(start, 2 - start) - ratio))
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    weights = np.where(x <= 1, near, np.where(x < 2, far, 0.0))
    return weights / weights.sum()


def axis_weights(
    m: _Mode, size: int, out: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """The [out, size] resampling matrix of one axis, and which outputs are extrapolated."""
    x = _source_coordinates(m, out, size, scale, roi)
    outside = (x < 0) | (x > size - 1) if m.coordinates == "tf_crop_and_resize" else np.zeros(out, bool)
    weights = np.zeros((out, size))
    for o in range(out):
        floor = math.floor(x[o])
        coeffs = _coefficients(m, 1.0 if x[o] == floor else x[o] - floor, scale)
        n = len(coeffs)
        pad = math.ceil(n / 2)
        frac = x[o] + pad - math.floor(x[o] + pad)
        if n % 2 == 0:
            first = -(n // 2) if frac == 0 else -(n // 2) + 1
        else:
            first = -((n - 1) // 2) + (0 if frac <= 0.5 else 1)
        index = math.floor(x[o] + pad) + first + np.arange(n) - pad
        if m.exclude_outside:
            coeffs = np.where((index < 0) | (index >= size), 0.0, coeffs)
            coeffs = coeffs / (coeffs.sum() or 1.0)
        if not outside[o]:
            np.add.at(weights[o], np.clip(index, 0, size - 1), coeffs)
    return weights, outside


def _resample_axis(
    b: Builder, x: Node, axis: int, weights: np.ndarray, outside: np.ndarray, m: _Mode
) -> Node:
    """Apply one axis's weights: a Gather for nearest, a MatMul along the axis otherwise."""
    out = weights.shape[0]
    if m.mode == "nearest":
        y = b.Gather(x, build.constant(b, np.argmax(weights, axis=1).astype(np.int64), "pick"), axis=axis)
    else:
        moved, inverse = build.move_axis_last(b, x, axis)
        rows = b.reshape(moved, (-1, x.type.shape[axis]))
        matrix = build.constant(b, weights.T.astype(x.type.dtype), "weights")
        y = b.reshape(b.MatMul(rows, matrix), moved.type.shape[:-1] + (out,))
        y = y if inverse is None else b.Transpose(y, shuffle=inverse)
    if not outside.any():
        return y
    mask = outside.reshape([-1 if i == axis else 1 for i in range(x.type.rank)])
    fill = b.splat(m.extrapolation, y)
    return b.Select(b.broadcast_to(build.constant(b, mask, "outside"), y.type.shape), fill, y)


def resize(
    b: Builder, x: Node, m: _Mode, sizes: Sequence[int], scales: Sequence[float], roi: Sequence[float]
) -> Node:
    """``x`` resampled to ``sizes`` (per axis; ``scales`` and ``roi`` as ONNX gives them, full rank)."""
    rank = x.type.rank
    if m.mode not in ("nearest", "linear", "cubic"):
        raise ShapeError(f"mode {m.mode!r} is not an ONNX resize mode (nearest, linear, cubic)")
    if m.mode != "nearest" and not x.type.elem.is_float:
        raise ShapeError(f"{m.mode} resize of {x.type} needs a float tensor")
    current_limits().check_tensor("the resized output", sizes, x.type.elem.itemsize)
    for axis in range(rank):
        size, out, scale = x.type.shape[axis], int(sizes[axis]), float(scales[axis])
        if size == 0 and out > 0:
            raise ShapeError(f"axis {axis} of {x.type} is empty, so it cannot be resized to {out}")
        # The weights are a dense [out, size] float64 table built while loading.
        current_limits().check_tensor(f"the resize weights of axis {axis}", (out, size), 8)
        span = (float(roi[axis]), float(roi[axis + rank]))
        if (
            math.isclose(scale, 1.0)
            and out == size
            and (math.isclose(span[0], 0) and math.isclose(span[1], 1))
        ):
            continue
        weights, outside = axis_weights(m, size, out, scale, span)
        x = _resample_axis(b, x, axis, weights, outside, m)
    return x


def _output_geometry(
    ctx: NodeContext, shape: tuple[int, ...], axes: list[int]
) -> tuple[list[int], list[float]]:
    """Output sizes and scales over all axes from the scales or sizes input (and the aspect policy)."""
    rank = len(shape)
    sizes_given = ctx.has(3) and ctx.static(3, "sizes").size > 0
    if not sizes_given:
        given = _scales(ctx.static(2, "scales") if ctx.has(2) else np.zeros(0), len(axes))
        scales = [1.0] * rank
        for axis, s in zip(axes, given, strict=True):
            scales[axis] = s
        return scaled_sizes(scales, shape), scales
    targets = list(shape)
    sizes = ctx.ints(3, "sizes")
    if len(sizes) != len(axes) or min(sizes) < 0:
        raise ShapeError(f"sizes {sizes} must hold {len(axes)} sizes >= 0, one per resized axis")
    for axis, s in zip(axes, sizes, strict=True):
        targets[axis] = s
    scales = [t / d if d else 1.0 for t, d in zip(targets, shape, strict=True)]
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return targets, scales
    if policy not in ("not_larger", "not_smaller"):
        raise ctx.refuse(f"keep_aspect_ratio_policy {policy!r} is not an ONNX policy")
    pick = min if policy == "not_larger" else max
    scale = pick(scales[a] for a in axes)
    scales = [scale if i in axes else 1.0 for i in range(rank)]
    return [int(scale * shape[i] + 0.5) if i in axes else shape[i] for i in range(rank)], scales


def _scales(array: np.ndarray, count: int) -> list[float]:
    """The scales input: ``count`` finite factors > 0 (a NaN, infinite or zero scale has no
    output size)."""
    scales = [float(s) for s in array.reshape(-1)]
    if len(scales) != count or not all(math.isfinite(s) and s > 0 for s in scales):
        raise ShapeError(f"scales {scales} must hold {count} finite factors > 0, one per resized axis")
    return scales


def scaled_sizes(scales: Sequence[float], shape: Sequence[int]) -> list[int]:
    """Output sizes floor(scale * size), as ONNX computes them from scales."""
    sizes = [s * d for s, d in zip(scales, shape, strict=True)]
    if not all(math.isfinite(v) for v in sizes):
        raise ShapeError(f"scales {list(scales)} make an infinite output size from {list(shape)}")
    return [int(v) for v in sizes]


def _resize_axes(ctx: NodeContext, rank: int) -> list[int]:
    """The ``axes`` attribute (all axes by default), each in range and listed once."""
    given = [int(a) for a in ctx.attr("axes", range(rank))]
    axes = [ctx.axis(a, rank, f"attribute 'axes' = {given}: axis") for a in given]
    if len(set(axes)) != len(axes):
        raise ctx.invalid(f"attribute 'axes' = {given} lists an axis twice")
    return axes


@importer("Resize", ranks={0: Rank.at_least(1), 1: 1, 2: 1, 3: 1})
def _resize(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    rank = x.type.rank
    if ctx.opset < 11:  # Resize-10: scales only, asymmetric coordinates, nearest takes the floor
        scales = _scales(ctx.static(1, "scales"), rank)
        m = _Mode(mode=ctx.attr("mode", "nearest"), coordinates="asymmetric", nearest="floor")
        sizes = scaled_sizes(scales, x.type.shape)
        return resize(ctx.b, x, m, sizes, scales, [0.0] * rank + [1.0] * rank)
    axes = _resize_axes(ctx, rank)
    sizes, scales = _output_geometry(ctx, x.type.shape, axes)
    roi = [0.0] * rank + [1.0] * rank
    if ctx.has(1) and ctx.static(1, "roi").size:
        given = [float(v) for v in ctx.static(1, "roi").reshape(-1)]
        if len(given) != 2 * len(axes):
            raise ShapeError(f"roi {given} must hold {2 * len(axes)} values, a start and an end per axis")
        for i, axis in enumerate(axes):
            roi[axis], roi[axis + rank] = given[i], given[i + len(axes)]
    m = _Mode(
        mode=ctx.attr("mode", "nearest"),
        coordinates=ctx.attr("coordinate_transformation_mode", "half_pixel"),
        nearest=ctx.attr("nearest_mode", "round_prefer_floor"),
        cubic_a=float(ctx.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(ctx.attr("exclude_outside", 0)),
        antialias=bool(ctx.attr("antialias", 0)),
        extrapolation=float(ctx.attr("extrapolation_value", 0.0)),
    )
    return resize(ctx.b, x, m, sizes, scales, roi)


@importer("Upsample", ranks={0: Rank.at_least(1), 1: 1})
def _upsample(ctx: NodeContext) -> Node:
    """Upsample-7/9: Resize with asymmetric coordinates (nearest takes the floor)."""
    x = ctx.node(0)
    rank = x.type.rank
    given = np.asarray(ctx.attr("scales", []), np.float64) if ctx.opset < 9 else ctx.static(1, "scales")
    scales = _scales(given, rank)
    m = _Mode(mode=ctx.attr("mode", "nearest"), coordinates="asymmetric", nearest="floor")
    sizes = scaled_sizes(scales, x.type.shape)
    return resize(ctx.b, x, m, sizes, scales, [0.0] * rank + [1.0] * rank)
