"""Importers for Resize and Upsample: each becomes one Resize node (glow_core.graph.nodes.resize).

The importer resolves the output geometry from the static inputs (scales or sizes, the
aspect-ratio policy, the region of interest, the axes) and the opset's defaults (Resize-10
and Upsample: asymmetric coordinates, nearest takes the floor); the node holds the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.node import Node


def _identity_roi(rank: int) -> tuple[float, ...]:
    return (0.0,) * rank + (1.0,) * rank


def _legacy_resize(ctx: NodeContext, x: Node, scales: list[float]) -> Node:
    """Resize-10 and Upsample: scales only, asymmetric coordinates, nearest takes the floor."""
    return ctx.b.Resize(
        x,
        sizes=tuple(scaled_sizes(scales, x.type.shape)),
        scales=tuple(scales),
        roi=_identity_roi(x.type.rank),
        mode=ctx.attr("mode", "nearest"),
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
        name=ctx.name,
    )


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
    if ctx.opset < 11:
        return _legacy_resize(ctx, x, _scales(ctx.static(1, "scales"), rank))
    axes = _resize_axes(ctx, rank)
    sizes, scales = _output_geometry(ctx, x.type.shape, axes)
    roi = list(_identity_roi(rank))
    if ctx.has(1) and ctx.static(1, "roi").size:
        given = [float(v) for v in ctx.static(1, "roi").reshape(-1)]
        if len(given) != 2 * len(axes):
            raise ShapeError(f"roi {given} must hold {2 * len(axes)} values, a start and an end per axis")
        for i, axis in enumerate(axes):
            roi[axis], roi[axis + rank] = given[i], given[i + len(axes)]
    return ctx.b.Resize(
        x,
        sizes=tuple(int(s) for s in sizes),
        scales=tuple(float(s) for s in scales),
        roi=tuple(roi),
        mode=ctx.attr("mode", "nearest"),
        coordinate_transformation_mode=ctx.attr("coordinate_transformation_mode", "half_pixel"),
        nearest_mode=ctx.attr("nearest_mode", "round_prefer_floor"),
        cubic_coeff_a=float(ctx.attr("cubic_coeff_a", -0.75)),
        exclude_outside=int(bool(ctx.attr("exclude_outside", 0))),
        antialias=int(bool(ctx.attr("antialias", 0))),
        extrapolation_value=float(ctx.attr("extrapolation_value", 0.0)),
        name=ctx.name,
    )


@importer("Upsample", ranks={0: Rank.at_least(1), 1: 1})
def _upsample(ctx: NodeContext) -> Node:
    """Upsample-7/9: Resize with asymmetric coordinates (nearest takes the floor)."""
    x = ctx.node(0)
    given = np.asarray(ctx.attr("scales", []), np.float64) if ctx.opset < 9 else ctx.static(1, "scales")
    return _legacy_resize(ctx, x, _scales(given, x.type.rank))
