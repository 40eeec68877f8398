"""Resize: separable resampling of any axes of a tensor, ONNX's Resize with its sizes,
scales and region of interest resolved to attributes.

Resizing is separable, so each resized axis is one 1-D operation whose weights depend only
on static shapes and attributes. The lowering computes those weights once, at compile time,
as a dense [out, in] matrix following the ONNX definition (coordinate transform, neighbour
choice, edge clamping, exclude_outside, antialias) and applies it as a MatMul along the axis;
nearest resizing is a Gather instead, which is exact for every element kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from glow_core.errors import ShapeError
from glow_core.graph.nodes.indexing import exact_constant, move_axis_last
from glow_core.limits import current_limits
from glow_core.primitives import NUMERIC_KINDS
from glow_core.spec import Attr, In, ex, expect, node

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


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
        y = b.Gather(x, exact_constant(b, np.argmax(weights, axis=1).astype(np.int64), "pick"), axis=axis)
    else:
        moved, inverse = move_axis_last(b, x, axis)
        rows = b.reshape(moved, (-1, x.type.shape[axis]))
        matrix = exact_constant(b, weights.T.astype(x.type.dtype), "weights")
        y = b.reshape(b.MatMul(rows, matrix), moved.type.shape[:-1] + (out,))
        y = y if inverse is None else b.Transpose(y, shuffle=inverse)
    if not outside.any():
        return y
    mask = outside.reshape([-1 if i == axis else 1 for i in range(x.type.rank)])
    fill = b.splat(m.extrapolation, y)
    return b.Select(b.broadcast_to(exact_constant(b, mask, "outside"), y.type.shape), fill, y)


def _unchanged(size: int, out: int, scale: float, span: tuple[float, float]) -> bool:
    """An axis kept as it is: same size, scale 1 and the whole range of interest."""
    whole = math.isclose(span[0], 0) and math.isclose(span[1], 1)
    return math.isclose(scale, 1.0) and out == size and whole


def _resize_type(input: Type, geometry: tuple[tuple, tuple, tuple], m: _Mode) -> Type:
    sizes, scales, roi = geometry
    rank = input.rank
    expect(m.mode in MODES, f"mode {m.mode!r} is not one of {MODES}", input)
    expect(
        m.coordinates in COORDINATE_MODES,
        f"coordinate mode {m.coordinates!r} is not one of {COORDINATE_MODES}",
        input,
    )
    expect(m.nearest in NEAREST_MODES, f"nearest_mode {m.nearest!r} is not one of {NEAREST_MODES}", input)
    expect(m.mode == "nearest" or input.elem.is_float, f"{m.mode} resize needs a float tensor", input)
    expect(len(sizes) == rank and len(scales) == rank, f"sizes and scales must give {rank} values", input)
    expect(len(roi) == 2 * rank, f"roi must give {rank} starts, then {rank} ends", input)
    expect(
        all(math.isfinite(s) and s > 0 for s in scales),
        f"scales {list(scales)} must be finite and > 0",
        input,
    )
    expect(min(sizes, default=0) >= 0, f"sizes {list(sizes)} must not be negative", input)
    for axis, (size, out) in enumerate(zip(input.shape, sizes, strict=True)):
        expect(size > 0 or out == 0, f"axis {axis} is empty, so it cannot be resized to {out}", input)
        if not _unchanged(size, out, scales[axis], (roi[axis], roi[axis + rank])):
            # The weights are a dense [out, size] float64 table built at compile time.
            current_limits().check_tensor(f"the resize weights of axis {axis}", (out, size), 8)
    return input.with_shape(tuple(sizes))


def _lower_resize(b: Builder, x: Node, geometry: tuple[tuple, tuple, tuple], m: _Mode) -> Node:
    sizes, scales, roi = geometry
    rank = x.type.rank
    for axis in range(rank):
        size, out, scale = x.type.shape[axis], int(sizes[axis]), float(scales[axis])
        span = (float(roi[axis]), float(roi[axis + rank]))
        if _unchanged(size, out, scale, span):
            continue
        weights, outside = axis_weights(m, size, out, scale, span)
        x = _resample_axis(b, x, axis, weights, outside, m)
    return x


@node
class Resize:
    """ONNX Resize (and Upsample) with the output geometry resolved: each axis resampled from
    its size to ``sizes`` by nearest, (antialiased) linear or cubic interpolation."""

    input = In()
    sizes = Attr(tuple, doc="the output shape")
    scales = Attr(tuple, doc="per axis, output / input as ONNX gives it (the coordinate transform reads it)")
    roi = Attr(tuple, doc="all starts, then all ends (tf_crop_and_resize); 0 and 1 elsewhere")
    mode = Attr(str, "nearest", "nearest, linear or cubic")
    coordinate_transformation_mode = Attr(str, "half_pixel", "as ONNX names them")
    nearest_mode = Attr(str, "round_prefer_floor", "as ONNX names them")
    cubic_coeff_a = Attr(float, -0.75)
    exclude_outside = Attr(int, 0, "1: weights of samples outside the input are dropped")
    antialias = Attr(int, 0, "1: a downscaling filter widened by 1 / scale")
    extrapolation_value = Attr(float, 0.0, "tf_crop_and_resize: the value outside the input")
    kinds = NUMERIC_KINDS
    examples = (
        ex("f32[1,2,4,4]", sizes=(1, 2, 6, 3), scales=(1.0, 1.0, 1.5, 0.75), roi=(0.0,) * 4 + (1.0,) * 4,
           mode="linear"),
        ex("f32[2,3,5]", sizes=(2, 6, 10), scales=(1.0, 2.0, 2.0), roi=(0.0,) * 3 + (1.0,) * 3,
           coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        ex("f32[1,1,8,6]", sizes=(1, 1, 4, 3), scales=(1.0, 1.0, 0.5, 0.5), roi=(0.0,) * 4 + (1.0,) * 4,
           mode="cubic", antialias=1, exclude_outside=1, cubic_coeff_a=-0.5),
        ex("f32[1,1,4,5]", sizes=(1, 1, 3, 3), scales=(1.0, 1.0, 0.75, 0.6),
           roi=(0.0, 0.0, 0.1, 0.2, 1.0, 1.0, 0.9, 1.2), mode="linear",
           coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5),
    )  # fmt: skip

    def type(
        input, sizes, scales, roi, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
        exclude_outside, antialias, extrapolation_value,
    ):  # fmt: skip
        m = _Mode(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                  bool(exclude_outside), bool(antialias), extrapolation_value)  # fmt: skip
        return _resize_type(input, (sizes, scales, roi), m)

    def lower(
        b, input, sizes, scales, roi, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
        exclude_outside, antialias, extrapolation_value,
    ):  # fmt: skip
        m = _Mode(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                  bool(exclude_outside), bool(antialias), extrapolation_value)  # fmt: skip
        return _lower_resize(b, input, (sizes, scales, roi), m)
