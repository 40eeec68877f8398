"""Convolution (NCHW, groups, strides, pads, dilations) as GEMMs specialized to its shapes.

(3x3 stride-1 convolutions with a constant filter may take Winograd, ``winograd.py``;
convolutions with more than one tap, 16 | Cin, 16 | Cout and a constant filter take the
direct blocked-channel kernel of ``conv_blocked.py`` instead; what follows is the rest.)

Per image and group, the output [Cout/g, OH*OW] is W[Cout/g, Cin/g*kh*kw] times the input
seen as a [Cin/g*kh*kw, OH*OW] matrix; the filter is packed into GEMM panels once, at compile
time. The input matrix is never built (no im2col):

- 1x1, stride 1, no padding: it *is* the input ([Cin, H*W] row-major), read in place.
- otherwise the padded input is copied once into scratch, split into stride phases
  (``Xq[c, a, e, y, x] = Xpad[c, y*sh + a, x*sw + e]``). The output is computed on the phase
  planes' width (OH x Wq positions; the Wq - OW extra columns are dropped afterwards), so
  for every filter tap the matrix row is a contiguous run of Xq at a fixed offset: the GEMM
  reads it in place (implicit GEMM, one tap per unrolled k step).

Depthwise convolutions (one input channel per group) are a direct vector kernel on the same
phase planes instead: their GEMM would have one row. Fused element-wise epilogues (bias,
residual, ReLU) are applied as the GEMM stores, or while the extra columns are dropped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_core.types import ElemKind, Type
from glow_cpu.emit import VECTOR, Kernel, Tensor, emits
from glow_cpu.kernels import conv_blocked, winograd
from glow_cpu.kernels.chain import chain_loop, tile_epilogue
from glow_cpu.kernels.gemm import KC, Gemm, emit_gemm, tile_for
from glow_cpu.kernels.linalg import F32_ONLY
from glow_cpu.kernels.ops import window_max
from glow_cpu.kernels.simd import fma, splat, vector_load, vector_store
from glow_cpu.loops import F32, float_at, for_range, i64, row_major_strides, shuffle_mask

DENSE_MAX_BLOCKS = 6
"""K blocks up to which a phase-plane convolution stores its output compressed (measured:
5 blocks gained 5%, 9 and 18 lost 2-5% against scratch and a drop pass, both with memory
and with register compresses)."""


@dataclass(frozen=True)
class Geometry:
    """Every static size of one convolution."""

    n: int
    c: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    pads: tuple[int, int, int, int]
    dh: int
    dw: int
    group: int

    @property
    def hp(self) -> int:
        return self.h + self.pads[0] + self.pads[2]

    @property
    def wp(self) -> int:
        return self.w + self.pads[1] + self.pads[3]

    @property
    def cin_g(self) -> int:
        return self.c // self.group

    @property
    def cout_g(self) -> int:
        return self.cout // self.group

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def hq(self) -> int:
        return -(-self.hp // self.sh)

    @property
    def wq(self) -> int:
        return -(-self.wp // self.sw)

    @property
    def plane_q(self) -> int:
        return self.hq * self.wq

    @property
    def phases(self) -> tuple[tuple[int, int], ...]:
        """The stride phases (row, column) some filter tap reads; only those are copied."""
        used = {
            ((i * self.dh) % self.sh, (j * self.dw) % self.sw) for i in range(self.kh) for j in range(self.kw)
        }
        return tuple(sorted(used))

    @property
    def chan(self) -> int:
        """Elements of one channel's phase planes."""
        return len(self.phases) * self.plane_q

    @property
    def phase_taps(self) -> tuple[int, ...]:
        """Element offset of each filter tap in a channel's phase planes (see ``_phase_input``)."""
        slot = {phase: n for n, phase in enumerate(self.phases)}
        offsets = []
        for i in range(self.kh):
            for j in range(self.kw):
                hh, ww = i * self.dh, j * self.dw
                phase = slot[(hh % self.sh, ww % self.sw)]
                offsets.append(phase * self.plane_q + hh // self.sh * self.wq + ww // self.sw)
        return tuple(offsets)


def geometry(k: Kernel) -> Geometry:
    (n, c, h, w), (cout, _, kh, kw) = k.types[1].shape, k.types[2].shape
    _, _, oh, ow = k.types[0].shape
    return Geometry(
        n, c, h, w, cout, kh, kw, oh, ow, *k.attrs["strides"], tuple(k.attrs["pads"]),
        *k.attrs["dilations"], k.attrs["group"],
    )  # fmt: skip


@emits("Convolution", kinds=F32_ONLY)
def emit_convolution(k: Kernel) -> None:
    g = geometry(k)
    k.work = g.n * g.cout * g.oh * g.ow * g.cin_g * g.taps // VECTOR
    if g.cin_g == 1 and g.group == g.c and g.group > 1:
        _depthwise(k, g)
    elif (variant := winograd.choose(g, k.values[2] is not None)) is not None:
        winograd.emit_winograd(k, g, variant)
    elif conv_blocked.applies(g, k.values[2] is not None):
        conv_blocked.emit_blocked(k, g)
    elif g.kh == g.kw == 1 and g.sh == g.sw == 1 and not any(g.pads):
        _direct_gemm(k, g)
    else:
        _phased_gemm(k, g)
    if k.epilogue and not k.epilogue_done:
        epilogue_pass(k)


def epilogue_pass(k: Kernel) -> None:
    """The fused element-wise chain as its own phase, over the finished result in place."""
    k.phase()
    dest = k.dest
    chain_loop(k, dest, k.epilogue, (dest, row_major_strides(dest.shape)))


def _filter_panels(k: Kernel, g: Geometry) -> tuple[ir.Value, int, int, int, tuple[int, int, int]]:
    """The filter as GEMM A operand: pointer, mr, nr, elements between two groups' A, and the
    (panel, row, k) strides. A constant filter is packed once; a runtime one is read as it
    is ([Cout/g, Cin/g*kh*kw] row-major per group)."""
    mr, nr = tile_for(g.cout_g, g.oh * g.ow, packed_a=k.values[2] is not None, accumulators=k.accumulators)
    depth = g.cin_g * g.taps
    if k.values[2] is None:
        return k.sources[1].ptr, mr, nr, g.cout_g * depth, (mr * depth, depth, 1)
    packed = k.pack(2, "conv_a_panels", group=g.group, mr=mr)
    return packed, mr, nr, -(-g.cout_g // mr) * mr * depth, (depth * mr, 1, mr)


def _direct_gemm(k: Kernel, g: Geometry) -> None:
    dest, (src, _) = k.dest, k.sources
    a, mr, nr, a_group, a_strides = _filter_panels(k, g)
    p = g.h * g.w
    b = k.b
    with for_range(b, g.group, name="grp") as grp:
        x = float_at(b, src.ptr, b.mul(grp, i64(g.cin_g * p)))
        y = float_at(b, dest.ptr, b.mul(grp, i64(g.cout_g * p)))
        w = float_at(b, a, b.mul(grp, i64(a_group)))
        gemm = _conv_gemm(g, (w, *a_strides), mr, nr, x, p, (0,), p, False, y, p)
        emit_gemm(k, _batched(k, g, gemm, grp, (g.c * p, g.cout * p)))


def _batched(k: Kernel, g: Geometry, gemm: Gemm, grp: ir.Value, strides: tuple[int, int]) -> Gemm:
    """``gemm`` over every image of the batch (one product per image sharing the filter),
    with the fused chain applied as it stores when the chain can be."""
    return dataclasses.replace(
        gemm,
        images=g.n,
        b_image=strides[0],
        c_image=strides[1],
        epilogue_for=lambda image: _output_epilogue(k, g, image, grp),
    )


def _conv_gemm(
    g: Geometry,
    a: tuple[ir.Value, int, int, int],
    mr: int,
    nr: int,
    b: ir.Value,
    n: int,
    taps: tuple[int, ...],
    b_outer: int,
    padded: bool,
    c: ir.Value,
    ldc: int,
) -> Gemm:
    depth = g.cin_g * g.taps
    return Gemm(
        m=g.cout_g,
        n=n,
        outer=g.cin_g if len(taps) > 1 else depth,
        taps=taps,
        a=a[0],
        a_panel=a[1],
        a_row=a[2],
        a_k=a[3],
        b=b,
        b_panel=nr,
        b_outer=b_outer,
        b_padded=padded,
        c=c,
        ldc=ldc,
        mr=mr,
        nr=nr,
    )


def _output_epilogue(k: Kernel, g: Geometry, image: ir.Value, grp: ir.Value):
    """The fused chain applied at GEMM stores straight into the output, when it can be."""
    if not k.epilogue:
        return None
    epilogue = tile_epilogue(k, k.types[0].shape, [(0, image)], 1, k.b.mul(grp, i64(g.cout_g)))
    k.epilogue_done = epilogue is not None
    return epilogue


def _phased_gemm(k: Kernel, g: Geometry) -> None:
    """Phase-split the padded input into scratch, then an implicit GEMM over the phase
    planes' width. Its extra columns are skipped as it stores (compressed stores straight
    into the output, epilogue applied) when the fused chain reads only per-channel values;
    otherwise it stores into scratch and a last pass drops them, applying the chain."""
    chan = g.chan
    grid = g.oh * g.wq
    nr = tile_for(g.cout_g, grid, packed_a=k.values[2] is not None, accumulators=k.accumulators)[1]
    taps = g.phase_taps
    slack = max(0, max(taps) + -(-grid // nr) * nr - chan) + VECTOR
    xq = k.shared_scratch((g.n * g.c * chan + slack) * 4)
    # A compress and a masked store (or load) cost more than plain ones; with many K blocks
    # (deep filters, small planes) the scratch and one drop pass over a small output win.
    direct = _per_channel_epilogue(k) and g.cin_g * g.taps <= DENSE_MAX_BLOCKS * KC
    ybuf = None if direct else k.shared_scratch(g.n * g.cout * grid * 4)
    _phase_input(k, g, k.shared(xq))
    k.phase()
    a, mr, nr, a_group, a_strides = _filter_panels(k, g)
    b = k.b
    plane = g.oh * g.ow if direct else grid
    out = k.dest.ptr if direct else k.shared(ybuf)
    with for_range(b, g.group, name="grp") as grp:
        x = float_at(b, k.shared(xq), b.mul(grp, i64(g.cin_g * chan)))
        y = float_at(b, out, b.mul(grp, i64(g.cout_g * plane)))
        w = float_at(b, a, b.mul(grp, i64(a_group)))
        gemm = _conv_gemm(g, (w, *a_strides), mr, nr, x, grid, taps, chan, True, y, plane)
        if direct:
            gemm = _batched(
                k, g, dataclasses.replace(gemm, dense=(g.wq, g.ow)), grp, (g.c * chan, g.cout * plane)
            )
        else:
            gemm = dataclasses.replace(gemm, images=g.n, b_image=g.c * chan, c_image=g.cout * plane)
        emit_gemm(k, gemm)
    if direct:
        k.epilogue_done = True
        return
    k.phase()  # drop the extra columns, applying the fused chain on the way
    full = Type((g.n, g.cout, g.oh, g.wq))
    chain_loop(k, k.dest, k.epilogue, (Tensor(k.shared(ybuf), full), row_major_strides(full.shape)))
    k.epilogue_done = True


def _per_channel_epilogue(k: Kernel) -> bool:
    """Whether every operand the fused chain reads is constant over a channel's plane (a
    bias, a splat): then the GEMM applies it while storing, whatever the column order."""
    buffers = [a for op in k.epilogue for a in op.operands if a.kind == "buffer"]
    return all(all(s == 0 for s in a.strides[2:]) for a in buffers)


def _phase_input(k: Kernel, g: Geometry, xq: ir.Value, fill: float = 0.0) -> None:
    """Xq[n, c, phase (a, e), y, x] = padded input[n, c, y*sh + a, x*sw + e] (zero outside
    the input), for the phases some tap reads; threads take whole (image, channel) planes."""
    start, stop = k.split(g.n * g.c)
    with for_range(k.b, stop, start, name="plane") as p:
        _phase_plane(k, g, float_at(k.b, xq, k.b.mul(p, i64(g.chan))), p, fill)


def _phase_plane(k: Kernel, g: Geometry, xq: ir.Value, p: ir.Value, fill: float) -> None:
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
                            value = _strided_load(k, first, lanes, g.sw)
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


def _by_plane_chunks(
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
            _phase_plane(k, g, float_at(b, xq, b.mul(b.sub(p, first), i64(g.chan))), p, fill)
        with for_range(b, end, first, name="plane") as p:
            compute(float_at(b, xq, b.mul(b.sub(p, first), i64(g.chan))), p)


def _strided_load(k: Kernel, first: ir.Value, lanes: int, stride: int) -> ir.Value:
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


def _depthwise(k: Kernel, g: Geometry) -> None:
    """Per input plane: its padded input phase-split into a private scratch (a few tens of
    KB: it stays in L1/L2), then for each output row of every output channel it feeds a
    vector loop: in the phase planes every filter tap reads a contiguous run, whatever the
    stride. (Until 2026-11-24 all planes were split into one shared scratch first, then
    computed after a phase barrier: at batch 8 the scratch outgrew the caches, and the
    stride-2 layers of MobileNetV2 ran 2-3x slower than onnxruntime's.)"""
    dest, (_, filt) = k.dest, k.sources
    mult = g.cout // g.c
    b = k.b

    def plane(xq: ir.Value, p: ir.Value) -> None:
        image, ci = b.udiv(p, i64(g.c)), b.urem(p, i64(g.c))
        with for_range(b, mult, name="m") as m, for_range(b, g.oh, name="oy") as y:
            co = b.add(b.mul(ci, i64(mult)), m)
            out_plane = b.add(b.mul(image, i64(g.cout)), co)
            weights = [filt.load(b, b.add(b.mul(co, i64(g.taps)), i64(t))) for t in range(g.taps)]
            out_row = float_at(b, dest.ptr, b.add(b.mul(out_plane, i64(g.oh * g.ow)), b.mul(y, i64(g.ow))))
            _depthwise_row(k, g, xq, b.mul(y, i64(g.wq)), weights, out_row)

    _by_plane_chunks(k, g, 0.0, plane)


def pool_vector(k: Kernel) -> None:
    """MaxPool, or AvgPool whose divisor is the whole window: per plane, the input
    phase-split into a private scratch (padded with NaN for a max, 0 for a sum), then one
    vector loop per output row, one contiguous load per window tap."""
    (n, c, h, w), (_, _, oh, ow) = k.types[1].shape, k.types[0].shape
    (kh, kw), strides, pads = k.attrs["kernel"], k.attrs["strides"], tuple(k.attrs["pads"])
    g = Geometry(n, c, h, w, c, kh, kw, oh, ow, *strides, pads, 1, 1, c)
    is_max = k.instr.kind == "MaxPool"
    inside = (oh - 1) * g.sh + kh <= h and (ow - 1) * g.sw + kw <= w  # no window past the edge
    if not any(pads) and inside and (VECTOR - 1) * g.sw + kw <= 2 * VECTOR:
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
                _window_row(k, g, xq, base, out_row, combine)
            else:
                scale = splat(b, ir.Constant(F32, 1.0 / (kh * kw)))
                add, mean = (lambda acc, x: b.fadd(acc, x)), (lambda acc: b.fmul(acc, scale))
                _window_row(k, g, xq, base, out_row, add, mean)

    _by_plane_chunks(k, g, math.nan if is_max else 0.0, pool_plane)  # NaN pads never win


def _pool_in_place(k: Kernel, g: Geometry, is_max: bool) -> None:
    """A pooling without padding read straight from its input (no phase-split copy): for 16
    outputs of a row, each window row is two (masked) vector loads, and each window column
    one shuffle of them picking every ``sw``-th lane. VGG-19's five 2x2 stride-2 MaxPools at
    batch 8, one thread: 34 ms through the phase-split copy, 12.7 ms in place (onnxruntime:
    12.5 ms)."""
    b = k.b
    dest, src = k.dest, k.sources[0]
    start, stop = k.split(g.n * g.c)
    combine = (lambda acc, x: window_max(ElemKind.float32)(b, acc, x)) if is_max else b.fadd
    scale = None if is_max else splat(b, ir.Constant(F32, 1.0 / (g.kh * g.kw)))
    with for_range(b, stop, start, name="plane") as plane, for_range(b, g.oh, name="oy") as y:
        out_row = float_at(b, dest.ptr, b.add(b.mul(plane, i64(g.oh * g.ow)), b.mul(y, i64(g.ow))))
        in_plane = b.add(b.mul(plane, i64(g.h * g.w)), b.mul(b.mul(y, i64(g.sh)), i64(g.w)))
        for outputs, lo, hi in _row_chunks(g.ow):
            needed = (outputs - 1) * g.sw + g.kw  # input elements the chunk's windows span
            with for_range(b, hi, lo, name="ox") as chunk:
                x0 = b.mul(chunk, i64(VECTOR))
                acc = None
                for i in range(g.kh):
                    row = float_at(b, src.ptr, b.add(b.add(in_plane, i64(i * g.w)), b.mul(x0, i64(g.sw))))
                    low = vector_load(k, row, min(VECTOR, needed))
                    high = (
                        vector_load(k, float_at(b, row, i64(VECTOR)), needed - VECTOR)
                        if needed > VECTOR
                        else low
                    )
                    for j in range(g.kw):
                        lanes = [min(lane * g.sw + j, 2 * VECTOR - 1) for lane in range(VECTOR)]
                        value = b.shuffle_vector(low, high, shuffle_mask(lanes))
                        acc = value if acc is None else combine(acc, value)
                if scale is not None:
                    acc = b.fmul(acc, scale)
                vector_store(k, float_at(b, out_row, x0), acc, outputs)


def _row_chunks(width: int) -> list[tuple[int, int, int]]:
    """(lanes, first chunk, end chunk) of a row ``width`` long cut into 16-lane chunks: the
    whole chunks, then a last partial one if any."""
    chunks, rest = divmod(width, VECTOR)
    runs = [(VECTOR, 0, chunks), (rest, chunks, chunks + 1)]
    return [(lanes, lo, hi) for lanes, lo, hi in runs if lanes and hi > lo]


def _window_row(k: Kernel, g: Geometry, xq, base, out_row, combine, finish=None) -> None:
    """out_row[x] = finish(combine over taps of xq[base + tap + x]), 16 columns at a time."""
    b = k.b
    for lanes, lo, hi in _row_chunks(g.ow):
        with for_range(b, hi, lo, name="ox") as chunk:
            x0 = b.mul(chunk, i64(VECTOR))
            acc = None
            for tap in g.phase_taps:
                value = vector_load(k, float_at(b, xq, b.add(b.add(base, x0), i64(tap))))
                acc = value if acc is None else combine(acc, value)
            vector_store(k, float_at(b, out_row, x0), finish(acc) if finish else acc, lanes)


def _depthwise_row(k: Kernel, g: Geometry, xq, base, weights, out_row) -> None:
    b = k.b
    splats = [splat(b, w) for w in weights]
    for lanes, lo, hi in _row_chunks(g.ow):
        with for_range(b, hi, lo, name="ox") as chunk:
            x0 = b.mul(chunk, i64(VECTOR))
            acc = ir.Constant(splats[0].type, None)
            for wv, tap in zip(splats, g.phase_taps, strict=True):
                at = b.add(b.add(base, x0), i64(tap))
                acc = fma(k, wv, vector_load(k, float_at(b, xq, at)), acc)
            vector_store(k, float_at(b, out_row, x0), acc, lanes)
