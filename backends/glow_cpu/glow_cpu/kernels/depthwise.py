"""Depthwise convolution (one input channel per group, MobileNet's 3x3 layers) as a direct
vector kernel: its GEMM would have one row.

Its shapes, the first that fits:

- **Flat** (stride 1, the output as wide as the input, rows that do not fill whole vectors:
  MobileNet's 7x7 to 56x56 planes): the plane read as one run of vectors,
  ``depthwise_flat.py``.
- **Row pairs** (stride 2, at most 8 outputs wide): two output rows per vector
  (``_stride2_pairs``).
- **Shared rows** (3x3, stride 2): as in place below, but an input row that is one output
  row's last filter row and the next one's first is read once (``_stride2_carry``).
- **In place** (stride 1 or 2, no dilation): each 16-output chunk of an output row reads its
  window straight from the input. A tap is one vector load for stride 1, two loads and one
  shuffle keeping the even lanes for stride 2 (in the order AVX2 gives cheaply,
  ``EVEN_BY_HALVES``). Padding costs nothing in the loop: a filter row above or below the
  plane reads a row inside it with its weights zeroed (a select, no branch), and the chunks
  at the left and right edges are peeled, their loads masked where the window leaves the
  row (a masked-off lane reads nothing and gives 0, the padding). Each filter row
  accumulates apart (three short FMA chains, not one of nine), and the fused chain (bias,
  ReLU6) is applied before the store. No copy: on AVX2 the phase-split copy of a stride-2
  layer cost as much as the convolution (MobileNetV2's 112x112 -> 56x56 layer 2.0x
  onnxruntime through it).
- **On phase planes** (any other stride or a dilation): per input plane its padded input
  phase-split into a private scratch, then for each output row a vector loop: in the phase
  planes every filter tap reads a contiguous run, whatever the stride.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.depthwise_flat import depthwise_flat, flat_fits
from glow_cpu.kernels.depthwise_planes import fuse_chain, plane_at
from glow_cpu.kernels.phase_planes import by_plane_chunks, row_chunks
from glow_cpu.kernels.simd import fma, masked_load, splat, vector_load, vector_store
from glow_cpu.loops import F32, I1, I64, PTR, float_at, for_range, i64, shuffle_mask, vector_constant

if TYPE_CHECKING:
    from glow_cpu.kernels.conv import Geometry


FLAT_PLANES = True
"""Whether stride-1 "same"-width layers whose rows do not fill whole vectors take the flat
kernel (``depthwise_flat``); read while the code is generated, so a benchmark can compile
the row kernel beside it (docs/performance.md)."""


STRIDE2_CARRY = True
"""Whether 3x3 stride-2 layers read each shared input row once, its share of the next output
row kept in a row buffer (``_stride2_carry``); read while the code is generated."""


STRIDE2_PAIRS = True
"""Whether stride-2 layers at most 8 outputs wide compute two output rows per vector
(``_stride2_pairs``); read while the code is generated."""


def depthwise(k: Kernel, g: Geometry) -> None:
    """The depthwise convolution ``g`` into ``k.dest``, in place when it can be."""
    if FLAT_PLANES and flat_fits(g):
        depthwise_flat(k, g)
    elif STRIDE2_PAIRS and g.sh == g.sw == 2 and g.dh == g.dw == 1 and g.ow <= VECTOR // 2:
        _stride2_pairs(k, g)
    elif STRIDE2_CARRY and g.kh == 3 and g.sh == g.sw == 2 and g.dh == g.dw == 1:
        _stride2_carry(k, g)
    elif g.dh == g.dw == 1 and g.sw in (1, 2):
        _in_place(k, g)
    else:
        _on_phase_planes(k, g)


def _in_place(k: Kernel, g: Geometry) -> None:
    """Threads take whole (image, channel) planes; see the module docstring."""
    dest = k.dest
    mult = g.cout // g.c
    b = k.b
    fused = fuse_chain(k)
    zero = ir.Constant(F32X16, None)
    start, stop = k.split(g.n * g.c)
    with for_range(b, stop, start, name="plane") as p, for_range(b, mult, name="m") as m:
        image, co, weights, in_plane, epilogue = plane_at(k, g, p, m, fused)
        out_plane = b.add(b.mul(image, i64(g.cout)), co)
        with for_range(b, g.oh, name="oy") as y:
            rows, row_weights = [], []
            for i in range(g.kh):
                r = b.sub(b.add(b.mul(y, i64(g.sh)), i64(i)), i64(g.pads[0]))
                inside = b.and_(b.icmp_signed(">=", r, i64(0)), b.icmp_signed("<", r, i64(g.h)))
                rows.append(float_at(b, in_plane, b.mul(b.select(inside, r, i64(0)), i64(g.w))))
                taps = weights[i * g.kw : (i + 1) * g.kw]
                row_weights.append([b.select(inside, w, zero) for w in taps])
            out_row = b.add(b.mul(out_plane, i64(g.oh * g.ow)), b.mul(y, i64(g.ow)))

            def finish(x0: ir.Value, acc: ir.Value, lanes: int, y: ir.Value = y) -> ir.Value:
                if epilogue is None:
                    return acc
                return epilogue(co, b.add(b.mul(y, i64(g.ow)), x0), acc, lanes)

            output_row(k, g, rows, row_weights, (dest.ptr, out_row), finish)


def output_row(
    k: Kernel,
    g: Geometry,
    rows: list[ir.Value],
    row_weights: list[list[ir.Value]],
    out_row: tuple[ir.Value, ir.Value],
    finish: Callable[[ir.Value, ir.Value, int], ir.Value],
) -> None:
    """One output row of one channel: filter row ``i`` (its ``kw`` splatted taps in
    ``row_weights[i]``) reads the input row at ``rows[i]``; ``finish(first output, value,
    lanes)`` applies what follows (the fused chain) before each chunk is stored at
    ``out_row`` (a pointer and the row's first element there). Shared with the kernel of an
    expansion and its depthwise layer (``expand_depthwise.py``), which reads its rows from a
    ring of expanded rows."""
    b = k.b
    zero = ir.Constant(F32X16, None)

    def chunk(x0: ir.Value, lanes: int, masks: list[list[bool]] | None) -> None:
        acc = None
        for row, taps in zip(rows, row_weights, strict=True):
            part = zero
            for j, w in enumerate(taps):
                first = b.add(b.mul(x0, i64(g.sw)), i64(j - g.pads[1]))
                part = fma(k, w, window(k, row, first, g.sw, masks[j] if masks else None), part)
            acc = part if acc is None else b.fadd(acc, part)
        if g.sw == 2:
            in_order = shuffle_mask(PAIRS_SWAPPED)
            acc = b.shuffle_vector(acc, ir.Constant(F32X16, ir.Undefined), in_order)
        acc = finish(x0, acc, lanes)
        vector_store(k, float_at(b, out_row[0], b.add(out_row[1], x0)), acc, lanes)

    chunks(k, g, chunk)


def _stride2_carry(k: Kernel, g: Geometry) -> None:
    """A 3x3 stride-2 layer whose shared input rows are read once: output row ``y``'s last
    input row is row ``y + 1``'s first, so its windows (two loads and a shuffle per tap,
    ``_window``) are built once and feed both, the next row's share kept in a buffer of one
    output row (on the stack: it stays in L1). Six windows per output vector instead of
    nine: on AVX2 the row kernel spent more on those loads and shuffles than on its FMAs.
    Output rows whose filter rows leave the plane are peeled (which rows those are is known
    when the code is generated); the rest run as a loop with no selects. (Walking each column
    chunk down the plane with the share in a register instead ran the same or up to 10%
    slower, and on a 112x112 plane, which outgrows L1, 1.71 ms against the row kernel's
    1.50 unless walked in bands.)"""
    dest = k.dest
    mult = g.cout // g.c
    b = k.b
    fused = fuse_chain(k)
    zero = ir.Constant(F32X16, None)
    top = g.pads[0]
    # output rows whose three input rows 2y - top .. 2y + 2 - top all lie in the plane
    y_lo = min(g.oh, -(-top // 2))
    y_hi = max(y_lo, min(g.oh, (g.h - 3 + top) // 2 + 1))
    row_buffer = k.alloca(ir.ArrayType(F32, -(-g.ow // VECTOR) * VECTOR))
    carry = b.inttoptr(b.ptrtoint(row_buffer, I64), PTR)  # opaque, as float_at wants
    undefined, in_order = ir.Constant(F32X16, ir.Undefined), shuffle_mask(PAIRS_SWAPPED)
    start, stop = k.split(g.n * g.c)
    with for_range(b, stop, start, name="plane") as p, for_range(b, mult, name="m") as m:
        image, co, weights, in_plane, epilogue = plane_at(k, g, p, m, fused)
        out_plane = b.add(b.mul(image, i64(g.cout)), co)

        def windows(r: ir.Value, x0: ir.Value, masks) -> list[ir.Value]:
            return stride2_windows(k, g, float_at(b, in_plane, b.mul(r, i64(g.w))), x0, masks)

        def taps(wins: list[ir.Value], i: int) -> ir.Value:
            return filter_row(k, weights[i * g.kw : (i + 1) * g.kw], wins)

        def first_carry(x0, lanes, masks) -> None:
            value = taps(windows(i64(-top), x0, masks), 0) if 0 <= -top < g.h else zero
            b.store(value, float_at(b, carry, x0), align=4)

        def output_row(y: ir.Value, static: int | None) -> None:
            def chunk(x0, lanes, masks) -> None:
                r1 = b.sub(b.add(b.mul(y, i64(2)), i64(1)), i64(top))
                slot = float_at(b, carry, x0)
                acc = b.load(slot, typ=F32X16, align=4)
                if static is None or 0 <= 2 * static + 1 - top < g.h:
                    acc = b.fadd(acc, taps(windows(r1, x0, masks), 1))
                if static is None or 0 <= 2 * static + 2 - top < g.h:
                    shared = windows(b.add(r1, i64(1)), x0, masks)
                    acc = b.fadd(acc, taps(shared, 2))
                    b.store(taps(shared, 0), slot, align=4)
                else:
                    b.store(zero, slot, align=4)
                acc = b.shuffle_vector(acc, undefined, in_order)
                col = b.add(b.mul(y, i64(g.ow)), x0)
                if epilogue is not None:
                    acc = epilogue(co, col, acc, lanes)
                out = b.add(b.mul(out_plane, i64(g.oh * g.ow)), col)
                vector_store(k, float_at(b, dest.ptr, out), acc, lanes)

            chunks(k, g, chunk)

        chunks(k, g, first_carry)
        for y in range(y_lo):
            output_row(i64(y), y)
        if y_hi > y_lo:
            with for_range(b, y_hi, y_lo, name="oy", vectorize=False) as y:
                output_row(y, None)
        for y in range(y_hi, g.oh):
            output_row(i64(y), y)


def stride2_windows(
    k: Kernel, g: Geometry, row: ir.Value, x0: ir.Value, masks: list[list[bool]] | None
) -> list[ir.Value]:
    """Per filter column, the inputs of a stride-2 row at ``row`` that the 16 outputs from
    ``x0`` multiply (``window``; ``masks`` as ``chunks`` gives them). Shared by the row carry
    here and the expansion-and-depthwise kernel (``expand_depthwise.py``)."""
    b = k.b
    firsts = [b.add(b.mul(x0, i64(2)), i64(j - g.pads[1])) for j in range(g.kw)]
    return [window(k, row, f, 2, masks[j] if masks else None) for j, f in enumerate(firsts)]


def filter_row(k: Kernel, taps: list[ir.Value], windows: list[ir.Value]) -> ir.Value:
    """One filter row's share of 16 outputs: its splatted ``taps`` times their ``windows``."""
    part = ir.Constant(F32X16, None)
    for tap, win in zip(taps, windows, strict=True):
        part = fma(k, tap, win, part)
    return part


def _stride2_pairs(k: Kernel, g: Geometry) -> None:
    """A stride-2 layer at most 8 outputs wide (MobileNetV2's 14x14 -> 7x7): a row chunk
    would fill 7 of 16 lanes, so each vector holds two output rows, lanes 0-7 row ``y`` and
    8-15 row ``y + 1``. A stride-2 window (``_window``) takes each 8-lane half from its own
    16-element load, so the second load simply reads two input rows further down. The two
    rows are adjacent in the output plane: the lanes are compacted to ``2 * ow`` contiguous
    ones with the same shuffle that undoes ``EVEN_BY_HALVES``. Pairs of rows whose filter
    rows leave the plane are peeled (their rows known when the code is generated); the
    rest run as a loop."""
    dest = k.dest
    mult = g.cout // g.c
    b = k.b
    fused = fuse_chain(k)
    zero = ir.Constant(F32X16, None)
    top, half = g.pads[0], VECTOR // 2
    pairs = -(-g.oh // 2)
    # pairs (rows 2t, 2t + 1) whose input rows 4t - top .. 4t + 2 + kh - 1 - top lie in the plane
    t_lo = min(pairs, -(-top // 4))
    t_hi = max(t_lo, min(g.oh // 2, (g.h - g.kh - 2 + top) // 4 + 1))
    # per filter column, which of the 16 elements a half's load spans are wanted and in the row
    wanted = [[0 <= j - g.pads[1] + q < g.w and q < 2 * g.ow for q in range(VECTOR)] for j in range(g.kw)]
    masks = [None if all(m) else vector_constant(I1, tuple(m)) for m in wanted]
    # lane x of the two rows back to back: row y's lane x, or row y + 1's lane x - ow
    compact = [PAIRS_SWAPPED[x if x < g.ow else half + x - g.ow] for x in range(2 * g.ow)]
    compact += [0] * (VECTOR - len(compact))
    undefined, in_order = ir.Constant(F32X16, ir.Undefined), shuffle_mask(compact)
    start, stop = k.split(g.n * g.c)
    with for_range(b, stop, start, name="plane") as p, for_range(b, mult, name="m") as m:
        image, co, weights, in_plane, epilogue = plane_at(k, g, p, m, fused)
        out_plane = b.add(b.mul(image, i64(g.cout)), co)

        def pair(t: ir.Value, static: int | None) -> None:
            """Output rows ``2t`` and ``2t + 1`` (``static``: ``t`` when peeled)."""
            y = b.mul(t, i64(2))
            acc = None
            for i in range(g.kh):
                rows = [b.sub(b.add(b.mul(y, i64(2)), i64(i + 2 * h)), i64(top)) for h in range(2)]
                inside = [static is None or 0 <= 4 * static + i + 2 * h - top < g.h for h in range(2)]
                if not any(inside):
                    continue
                part = zero
                for j in range(g.kw):
                    loads = []
                    for h in range(2):
                        at = b.add(b.mul(rows[h], i64(g.w)), i64(j - g.pads[1]))
                        if not inside[h]:
                            loads.append(zero)  # a filter row in the padding: no load at all
                            continue
                        loads.append(masked_load(k, float_at(b, in_plane, at), masks[j]))
                    window = b.shuffle_vector(loads[0], loads[1], shuffle_mask(EVEN_BY_HALVES))
                    part = fma(k, weights[i * g.kw + j], window, part)
                acc = part if acc is None else b.fadd(acc, part)
            acc = b.shuffle_vector(acc if acc is not None else zero, undefined, in_order)
            lanes = g.ow * (2 if static is None or 2 * static + 1 < g.oh else 1)
            col = b.mul(y, i64(g.ow))
            if epilogue is not None:
                acc = epilogue(co, col, acc, lanes)
            out = b.add(b.mul(out_plane, i64(g.oh * g.ow)), col)
            vector_store(k, float_at(b, dest.ptr, out), acc, lanes)

        for t in range(t_lo):
            pair(i64(t), t)
        if t_hi > t_lo:
            with for_range(b, t_hi, t_lo, name="pair", vectorize=False) as t:
                pair(t, None)
        for t in range(t_hi, pairs):
            pair(i64(t), t)


def chunks(k: Kernel, g: Geometry, chunk) -> None:
    """``chunk(first output, lanes, masks)`` over an output row: a loop over the interior
    chunks (every tap's loads whole and inside the row: masks None) and the edge chunks
    peeled, with the lanes of each tap's loads that fall inside the row as masks (the
    interior ones are contiguous: the window leaves the row only at the ends)."""
    b = k.b
    count = -(-g.ow // VECTOR)
    interior = [c for c in range(count) if _masks(g, c) is None]
    lo, hi = (interior[0], interior[-1] + 1) if interior else (count, count)
    for c in range(lo):
        chunk(i64(c * VECTOR), min(VECTOR, g.ow - c * VECTOR), _masks(g, c))
    if hi > lo:
        with for_range(b, hi, lo, name="ox") as c:
            chunk(b.mul(c, i64(VECTOR)), VECTOR, None)
    for c in range(hi, count):
        chunk(i64(c * VECTOR), min(VECTOR, g.ow - c * VECTOR), _masks(g, c))


def _masks(g: Geometry, c: int) -> list[list[bool]] | None:
    """Per filter column, which of the ``16 * sw`` input elements chunk ``c``'s loads span lie
    inside the row (and are wanted); None when all of them for every column."""
    lanes = min(VECTOR, g.ow - c * VECTOR)
    masks = []
    for j in range(g.kw):
        first = c * VECTOR * g.sw + j - g.pads[1]
        masks.append([0 <= first + q < g.w and q < lanes * g.sw for q in range(VECTOR * g.sw)])
    return None if all(all(m) for m in masks) else masks


def window(k: Kernel, row: ir.Value, first: ir.Value, stride: int, mask: list[bool] | None) -> ir.Value:
    """Input elements ``first + stride * lane`` of ``row`` for the 16 lanes; with ``mask``
    (over the ``16 * stride`` elements spanned) only those lanes read, the others 0."""
    b = k.b
    parts = []
    for half in range(stride):
        lanes = mask[half * VECTOR : (half + 1) * VECTOR] if mask else None
        ptr = float_at(b, row, b.add(first, i64(half * VECTOR)))
        if lanes is None or all(lanes):
            parts.append(vector_load(k, ptr))
        elif not any(lanes):
            parts.append(ir.Constant(F32X16, None))
        else:
            parts.append(masked_load(k, ptr, ir.Constant(ir.VectorType(I1, VECTOR), [int(x) for x in lanes])))
    if stride == 1:
        return parts[0]
    return b.shuffle_vector(parts[0], parts[1], shuffle_mask(EVEN_BY_HALVES))


EVEN_BY_HALVES = [0, 2, 8, 10, 4, 6, 12, 14, 16, 18, 24, 26, 20, 22, 28, 30]
"""The even lanes of two 16-lane vectors, in the order one ``vshufps`` per 8-lane half gives
them (outputs 0, 1, 4, 5, 2, 3, 6, 7, then the same +8): in order they would cost a second,
lane-crossing shuffle per tap on AVX2; a stride-2 chunk accumulates in this order and is put
back in order once, before its epilogue and store (``PAIRS_SWAPPED``)."""

PAIRS_SWAPPED = [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]
"""Swaps the middle pairs of each 8-lane half (one ``vpermpd`` each): undoes
``EVEN_BY_HALVES``'s order, and is its own inverse."""


def _on_phase_planes(k: Kernel, g: Geometry) -> None:
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
            depthwise_row(k, g, xq, b.mul(y, i64(g.wq)), weights, out_row)

    by_plane_chunks(k, g, 0.0, plane)


def depthwise_row(k: Kernel, g: Geometry, xq, base, weights, out_row) -> None:
    b = k.b
    splats = [splat(b, w) for w in weights]
    for lanes, lo, hi in row_chunks(g.ow):
        with for_range(b, hi, lo, name="ox") as chunk:
            x0 = b.mul(chunk, i64(VECTOR))
            acc = ir.Constant(splats[0].type, None)
            for wv, tap in zip(splats, g.phase_taps, strict=True):
                at = b.add(b.add(base, x0), i64(tap))
                acc = fma(k, wv, vector_load(k, float_at(b, xq, at)), acc)
            vector_store(k, float_at(b, out_row, x0), acc, lanes)
