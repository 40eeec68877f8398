"""Phase planes: a padded input plane split by stride phase, so that every filter or window
tap of a strided convolution or pooling reads a contiguous run.

``Xq[c, a, e, y, x] = Xpad[c, y*sh + a, x*sw + e]`` for the phases (a, e) some tap reads
(``Geometry.phases``); ``Geometry.phase_taps`` gives each tap's offset in a channel's planes.
The implicit-GEMM convolution (``conv.py``) splits all planes into shared scratch first; the
depthwise convolution (``depthwise.py``) and pooling (``pool.py``) split them in L1-sized
chunks just before computing on them (``by_plane_chunks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.emit import VECTOR, Kernel
from glow_cpu.kernels.simd import vector_load, vector_store
from glow_cpu.loops import F32, float_at, for_range, i64, shuffle_mask

if TYPE_CHECKING:
    from glow_cpu.kernels.conv import Geometry


def phase_input(k: Kernel, g: Geometry, xq: ir.Value, fill: float = 0.0) -> None:
    """Xq[n, c, phase (a, e), y, x] = padded input[n, c, y*sh + a, x*sw + e] (zero outside
    the input), for the phases some tap reads; threads take whole (image, channel) planes."""
    start, stop = k.split(g.n * g.c)
    with for_range(k.b, stop, start, name="plane") as p:
        phase_plane(k, g, float_at(k.b, xq, k.b.mul(p, i64(g.chan))), p, fill)


def phase_plane(k: Kernel, g: Geometry, xq: ir.Value, p: ir.Value, fill: float) -> None:
    """The phase planes of input plane ``p`` (image * C + channel) at ``xq``. The in-bounds
    columns of a phase row are known statically: a fill run, a copy, a fill run; the copy is
    whole vectors for stride 1 and 2 (stride 2: two loads, the even or odd lanes picked)."""
    src = k.sources[0]
    b = k.b
    top, left = g.pads[0], g.pads[1]
    zero = ir.Constant(F32, fill)
    for slot, (a, e) in enumerate(g.phases):
        with for_range(b, g.hq, name="y") as y:
            ih = b.sub(b.add(b.mul(y, i64(g.sh)), i64(a)), i64(top))
            inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, i64(g.h)))
            source_row = b.add(b.mul(p, i64(g.h * g.w)), b.mul(ih, i64(g.w)))
            row = float_at(b, xq, b.add(i64(slot * g.plane_q), b.mul(y, i64(g.wq))))
            lo = min(g.wq, max(0, -(-(left - e) // g.sw)))
            hi = max(lo, min(g.wq, (g.w - 1 + left - e) // g.sw + 1))
            with b.if_else(inside) as (copy, blank):
                with copy:
                    with for_range(b, lo) as x:
                        b.store(zero, float_at(b, row, x))
                    if g.sw in (1, 2):
                        for v in range(0, hi - lo, VECTOR):
                            lanes = min(VECTOR, hi - lo - v)
                            first = float_at(b, src.ptr, b.add(source_row, i64((lo + v) * g.sw + e - left)))
                            value = strided_load(k, first, lanes, g.sw)
                            vector_store(k, float_at(b, row, i64(lo + v)), value, lanes)
                    else:
                        with for_range(b, hi, lo) as x:
                            column = b.sub(b.add(b.mul(x, i64(g.sw)), i64(e)), i64(left))
                            b.store(src.load(b, b.add(source_row, column)), float_at(b, row, x))
                    with for_range(b, g.wq, hi) as x:
                        b.store(zero, float_at(b, row, x))
                with blank, for_range(b, g.wq) as x:
                    b.store(zero, float_at(b, row, x))


PLANE_CHUNK_BYTES = 32 << 10
"""Phase planes split per chunk of input planes before they are read (within L1)."""


def by_plane_chunks(
    k: Kernel, g: Geometry, fill: float, compute: Callable[[ir.Value, ir.Value], None]
) -> None:
    """This thread's input planes in chunks: the chunk's padded phase planes split into a
    private scratch (about 32 KB, or one plane), then ``compute(phase planes, plane)`` for
    each plane of the chunk while they are in cache. Not one plane at a time: the reads
    right behind the copy's stores of a small plane waited for the stores to drain
    (MobileNetV2's 7x7 depthwise layers ran 1.8x slower that way); not all planes first:
    at batch 8 that scratch outgrew the caches (its stride-2 layers 2-3x onnxruntime's)."""
    b = k.b
    chunk = max(1, PLANE_CHUNK_BYTES // (4 * g.chan))
    xq = k.private_scratch((chunk * g.chan + max(g.phase_taps) + VECTOR) * 4)
    start, stop = k.split(g.n * g.c)
    with for_range(b, stop, start, step=chunk, name="chunk") as first:
        end = b.add(first, i64(chunk))
        end = b.select(b.icmp_signed("<", end, stop), end, stop)
        with for_range(b, end, first, name="plane") as p:
            phase_plane(k, g, float_at(b, xq, b.mul(b.sub(p, first), i64(g.chan))), p, fill)
        with for_range(b, end, first, name="plane") as p:
            compute(float_at(b, xq, b.mul(b.sub(p, first), i64(g.chan))), p)


def strided_load(k: Kernel, first: ir.Value, lanes: int, stride: int) -> ir.Value:
    """``lanes`` floats ``stride`` (1 or 2) apart from ``first`` in the first lanes of a
    vector, reading no element past the last one taken."""
    if stride == 1:
        return vector_load(k, first, lanes)
    span = (lanes - 1) * 2 + 1  # elements from the first taken to the last
    b = k.b
    low = vector_load(k, first, min(VECTOR, span))
    high = vector_load(k, float_at(b, first, i64(VECTOR)), span - VECTOR) if span > VECTOR else low
    even = [min(2 * lane, 2 * VECTOR - 1) for lane in range(VECTOR)]
    return b.shuffle_vector(low, high, shuffle_mask(even))


def row_chunks(width: int) -> list[tuple[int, int, int]]:
    """(lanes, first chunk, end chunk) of a row ``width`` long cut into 16-lane chunks: the
    whole chunks, then a last partial one if any."""
    chunks, rest = divmod(width, VECTOR)
    runs = [(VECTOR, 0, chunks), (rest, chunks, chunks + 1)]
    return [(lanes, lo, hi) for lanes, lo, hi in runs if lanes and hi > lo]
