"""Stride-1 depthwise convolution over a plane read as one flat run: every vector full.

A "same"-width layer (stride 1, no dilation, left + right pads = filter width - 1: the
output as wide as the input) shifts the whole plane by one constant per filter tap: output
``q = y * w + x`` reads input ``q + (i - top) * w + (j - left)``. So 16 consecutive
outputs, whatever rows they straddle, read 16 consecutive inputs per tap. MobileNet's 7x7
and 14x14 planes filled 7 and 14 of 16 lanes per row chunk in the row kernel
(``depthwise._in_place``); flat, a 7x7 plane is 4 vectors instead of 7.

What a row kernel did with its edges:

- **A tap leaving the row** (a column in the left or right padding) reads the neighbouring
  row's element. Taps of one filter column ``j`` share which lanes are wrong, so each
  column accumulates apart and its sum is cleared in those lanes (one select per column
  and vector, against a constant: the lanes' columns are known when the code is generated).
- **A tap leaving the plane** (a filter row in the top or bottom padding) is a masked load:
  lanes outside the plane read nothing and give 0. Only the first and last few vectors of a
  plane have such loads.

Which lanes are which is static: the column of lane ``l`` of vector ``c`` is
``(16 c + l) mod w``, a pattern that repeats every ``lcm(16, w) / 16`` vectors (7 for
widths 7, 14, 28, 56 and 112). The vectors whose loads all stay inside the plane run as a
loop over whole periods, each period's vectors unrolled with their constant selects; the
ones before and after it are peeled with their masks.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.depthwise_planes import fuse_chain, plane_at
from glow_cpu.kernels.simd import fma, masked_load, vector_store
from glow_cpu.loops import I1, float_at, for_range, i64, vector_constant

if TYPE_CHECKING:
    from glow_cpu.kernels.conv import Geometry

MAX_PERIOD = 8
"""The most vectors one loop iteration unrolls (a column pattern's period); a width whose
period is longer (e.g. 13: 13 vectors) keeps the row kernel rather than grow the code."""


def period(width: int) -> int:
    """Vectors after which the lanes' columns repeat: ``lcm(16, width) / 16``."""
    return math.lcm(VECTOR, width) // VECTOR


def flat_fits(g: Geometry) -> bool:
    """Whether ``g`` takes the flat kernel: stride 1, no dilation, the output as wide as the
    input, a row that does not fill whole vectors (a multiple of 16 fills them already in the
    row kernel), and a short column period."""
    same_width = g.pads[1] + g.pads[3] == g.kw - 1 and g.ow == g.w
    return (
        g.sh == g.sw == 1
        and g.dh == g.dw == 1
        and same_width
        and g.w % VECTOR != 0
        and period(g.w) <= MAX_PERIOD
    )


def _offsets(g: Geometry) -> list[list[int]]:
    """Per filter row and column, the tap's input offset from its output in the flat plane."""
    return [[(i - g.pads[0]) * g.w + (j - g.pads[1]) for j in range(g.kw)] for i in range(g.kh)]


def _load_lanes(g: Geometry, c: int, offset: int) -> tuple[bool, ...]:
    """Lanes of vector ``c``'s load at ``offset`` that lie inside the input plane (and belong
    to an output of the plane)."""
    outputs, plane = g.oh * g.ow, g.h * g.w
    return tuple(
        c * VECTOR + lane < outputs and 0 <= c * VECTOR + lane + offset < plane for lane in range(VECTOR)
    )


def _column_lanes(g: Geometry, c: int, j: int) -> tuple[bool, ...]:
    """Lanes of vector ``c`` whose filter column ``j`` falls inside the row (not the padding)."""
    return tuple(0 <= (c * VECTOR + lane) % g.w + j - g.pads[1] < g.w for lane in range(VECTOR))


def _whole(g: Geometry, c: int) -> bool:
    """Whether every load of vector ``c`` is a plain one (all lanes inside the plane)."""
    return all(all(_load_lanes(g, c, o)) for row in _offsets(g) for o in row)


def depthwise_flat(k: Kernel, g: Geometry) -> None:
    """The depthwise convolution ``g`` (``flat_fits``) into ``k.dest``; threads take whole
    (image, channel) planes."""
    dest = k.dest
    mult = g.cout // g.c
    b = k.b
    fused = fuse_chain(k)
    zero = ir.Constant(F32X16, None)
    offsets = _offsets(g)
    count = -(-g.oh * g.ow // VECTOR)
    whole = [c for c in range(count) if _whole(g, c)]
    lo = whole[0] if whole else count
    hi = whole[-1] + 1 if whole else count
    assert whole == list(range(lo, hi)), "loads leave the plane only at its ends"
    step = period(g.w)
    rounds = (hi - lo) // step
    start, stop = k.split(g.n * g.c)
    planes = for_range(b, stop, start, name="plane", vectorize=False)
    with planes as p, for_range(b, mult, name="m", vectorize=False) as m:
        image, co, weights, in_plane, epilogue = plane_at(k, g, p, m, fused)
        out_plane = float_at(b, dest.ptr, b.mul(b.add(b.mul(image, i64(g.cout)), co), i64(g.oh * g.ow)))

        def vector(c: int, first: ir.Value, plain: bool) -> None:
            """Outputs ``first .. first + 16`` (vector ``c`` of the plane, or one with its
            column pattern when ``plain``: then no load is masked)."""
            lanes = min(VECTOR, g.oh * g.ow - c * VECTOR)
            total = None
            for j in range(g.kw):
                acc = zero
                for i in range(g.kh):
                    at = float_at(b, in_plane, b.add(first, i64(offsets[i][j])))
                    inside = None if plain else _load_lanes(g, c, offsets[i][j])
                    if inside is not None and not any(inside):
                        continue  # a filter row wholly in the padding for these outputs
                    mask = None if inside is None or all(inside) else vector_constant(I1, inside)
                    acc = fma(k, weights[i * g.kw + j], masked_load(k, at, mask), acc)
                columns = _column_lanes(g, c, j)
                if not all(columns):
                    acc = b.select(vector_constant(I1, columns), acc, zero)
                total = acc if total is None else b.fadd(total, acc)
            if epilogue is not None:
                total = epilogue(co, first, total, lanes)
            vector_store(k, float_at(b, out_plane, first), total, lanes)

        for c in range(lo):
            vector(c, i64(c * VECTOR), plain=False)
        if rounds:
            with for_range(b, rounds, name="period", vectorize=False) as r:
                base = b.add(i64(lo * VECTOR), b.mul(r, i64(step * VECTOR)))
                for u in range(step):
                    vector(lo + u, b.add(base, i64(u * VECTOR)), plain=True)
        for c in range(lo + rounds * step, count):
            vector(c, i64(c * VECTOR), plain=False)
