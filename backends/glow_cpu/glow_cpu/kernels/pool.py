"""MaxPool and whole-window AvgPool as vector kernels: read in place when no window crosses
the edge, otherwise on phase planes padded with NaN (max) or 0 (sum)."""

from __future__ import annotations

import math

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import VECTOR, Kernel
from glow_cpu.kernels.conv import Geometry
from glow_cpu.kernels.ops import window_max
from glow_cpu.kernels.phase_planes import by_plane_chunks, row_chunks
from glow_cpu.kernels.simd import splat, vector_load, vector_store
from glow_cpu.loops import F32, float_at, for_range, i64, shuffle_mask


def pool_vector(k: Kernel) -> None:
    """MaxPool, or AvgPool whose divisor is the whole window: per plane, the input
    phase-split into a private scratch (padded with NaN for a max, 0 for a sum), then one
    vector loop per output row, one contiguous load per window tap."""
    (n, c, h, w), (_, _, oh, ow) = k.types[1].shape, k.types[0].shape
    (kh, kw), strides, pads = k.attrs["kernel"], k.attrs["strides"], tuple(k.attrs["pads"])
    g = Geometry(n, c, h, w, c, kh, kw, oh, ow, *strides, pads, 1, 1, c)
    is_max = k.instr.kind == "MaxPool"
    inside = (oh - 1) * g.sh + kh <= h and (ow - 1) * g.sw + kw <= w  # no window past the edge
    if not any(pads) and inside and g.sw <= MAX_IN_PLACE_STRIDE:
        _pool_in_place(k, g, is_max)
        return
    dest = k.dest
    b = k.b

    def pool_plane(xq: ir.Value, plane: ir.Value) -> None:
        with for_range(b, oh, name="oy") as y:
            base = b.mul(y, i64(g.wq))
            out_row = float_at(b, dest.ptr, b.add(b.mul(plane, i64(oh * ow)), b.mul(y, i64(ow))))
            if is_max:
                combine = lambda acc, x: window_max(ElemKind.float32)(b, acc, x)  # noqa: E731
                window_row(k, g, xq, base, out_row, combine)
            else:
                scale = splat(b, ir.Constant(F32, 1.0 / (kh * kw)))
                add, mean = (lambda acc, x: b.fadd(acc, x)), (lambda acc: b.fmul(acc, scale))
                window_row(k, g, xq, base, out_row, add, mean)

    by_plane_chunks(k, g, math.nan if is_max else 0.0, pool_plane)  # NaN pads never win


MAX_IN_PLACE_STRIDE = 2
"""The widest column stride the in-place kernel reads: 16 outputs at stride ``sw`` span
``15 * sw + 1`` inputs per window column, which two vectors hold up to stride 2."""


def _pool_in_place(k: Kernel, g: Geometry, is_max: bool) -> None:
    """A pooling without padding read straight from its input (no phase-split copy): for 16
    outputs of a row, each window row is two (masked) vector loads, and each window column
    one shuffle of them picking every ``sw``-th lane. VGG-19's five 2x2 stride-2 MaxPools at
    batch 8, one thread: 34 ms through the phase-split copy, 12.7 ms in place (onnxruntime:
    12.5 ms).

    A window wider than those two vectors hold (``15 * sw + kw > 32``: Inception-v3's 3x3
    stride-2 MaxPools) loads two vectors per window column instead, starting at that
    column, so each column's lanes still come from one shuffle. Inception-v3's first MaxPool
    (64 channels, 147x147 -> 73x73), one thread on an AVX2 core: 1.32 ms through the
    phase-split copy, onnxruntime 0.69 ms."""
    b = k.b
    dest, src = k.dest, k.sources[0]
    start, stop = k.split(g.n * g.c)
    combine = (lambda acc, x: window_max(ElemKind.float32)(b, acc, x)) if is_max else b.fadd
    scale = None if is_max else splat(b, ir.Constant(F32, 1.0 / (g.kh * g.kw)))
    with for_range(b, stop, start, name="plane") as plane, for_range(b, g.oh, name="oy") as y:
        out_row = float_at(b, dest.ptr, b.add(b.mul(plane, i64(g.oh * g.ow)), b.mul(y, i64(g.ow))))
        in_plane = b.add(b.mul(plane, i64(g.h * g.w)), b.mul(b.mul(y, i64(g.sh)), i64(g.w)))
        for outputs, lo, hi in row_chunks(g.ow):
            needed = (outputs - 1) * g.sw + g.kw  # input elements the chunk's windows span
            # One pair of loads per window row, or, when the window does not fit two
            # vectors, one pair per window column starting at that column.
            starts = (0,) if needed <= 2 * VECTOR else tuple(range(g.kw))
            with for_range(b, hi, lo, name="ox") as chunk:
                x0 = b.mul(chunk, i64(VECTOR))
                acc = None
                for i in range(g.kh):
                    row = float_at(b, src.ptr, b.add(b.add(in_plane, i64(i * g.w)), b.mul(x0, i64(g.sw))))
                    for first in starts:
                        span = needed - first if len(starts) == 1 else (outputs - 1) * g.sw + 1
                        low = vector_load(k, float_at(b, row, i64(first)), min(VECTOR, span))
                        high = (
                            vector_load(k, float_at(b, row, i64(first + VECTOR)), span - VECTOR)
                            if span > VECTOR
                            else low
                        )
                        columns = range(g.kw) if len(starts) == 1 else (first,)
                        for j in columns:
                            lanes = [min(lane * g.sw + j - first, 2 * VECTOR - 1) for lane in range(VECTOR)]
                            value = b.shuffle_vector(low, high, shuffle_mask(lanes))
                            acc = value if acc is None else combine(acc, value)
                if scale is not None:
                    acc = b.fmul(acc, scale)
                vector_store(k, float_at(b, out_row, x0), acc, outputs)


def window_row(k: Kernel, g: Geometry, xq, base, out_row, combine, finish=None) -> None:
    """out_row[x] = finish(combine over taps of xq[base + tap + x]), 16 columns at a time."""
    b = k.b
    for lanes, lo, hi in row_chunks(g.ow):
        with for_range(b, hi, lo, name="ox") as chunk:
            x0 = b.mul(chunk, i64(VECTOR))
            acc = None
            for tap in g.phase_taps:
                value = vector_load(k, float_at(b, xq, b.add(b.add(base, x0), i64(tap))))
                acc = value if acc is None else combine(acc, value)
            vector_store(k, float_at(b, out_row, x0), finish(acc) if finish else acc, lanes)
