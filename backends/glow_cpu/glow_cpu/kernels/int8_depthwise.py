"""int8 depthwise convolution (one input and one output channel per group: MobileNet's 3x3
layers, and the 1x1 layers a folded BatchNorm leaves), exact and vectorized along the width.

Per (image, channel) plane, in the thread's private scratch:

1. **Centered phase planes.** The plane is copied once, padded, split by stride phase and
   widened to int16 *centered on the input zero point*: ``P[a, e, y, x] = Xpad[y*sh + a,
   x*sw + e] - o_x``. The padding (the zero point) is then 0, so it costs nothing in the
   sums, and every filter tap (ky, kx) of ``CHUNK`` consecutive outputs of a row is one
   contiguous vector load, whatever the stride or dilation (as in ``_split_phases`` of
   ``int8_conv.py``, there in int8 and shared). The copy loads ``CHUNK * sw`` input bytes
   at a time, widens them once and deinterleaves the phases with one shuffle each.
2. **Neighbour pairs.** ``pairs[i] = (P[i], P[i + 1])`` (flat over the planes), so two
   taps whose reads are neighbouring columns of one phase row (kx 0 and 1 at stride 1, 0
   and 2 at stride 2) share one ``madd`` (``vpmaddwd``) with the weight pair (w_a, w_b); a
   tap left alone pairs with weight 0. Exact: ``|x - o_x| <= 255`` and ``|w| <= 128``,
   and a pair sum fits int32. A 3x3 window is 6 steps instead of 9 products.
3. **Accumulators in registers.** For ``CHUNK`` outputs of a row the steps are unrolled
   into two 8-lane int32 accumulators (one when a last chunk has at most 8 outputs).
4. **Requantization a vector at a time**: ``int8_conv.requantize`` on the ``CHUNK`` int32
   sums, the reference's float64 formula (``sum((x - o_x) w) = sum(x w) - o_x sum(w)``, so
   no weight-sum term), bit-equal to the interpreter.

The former kernel accumulated in a memory row with a scalar loop per tap and requantized
element by element; the loops here are marked not to vectorize (the vectors are explicit;
LLVM's loop vectorizer aborts on some small loops for AVX-512 targets).
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel
from glow_cpu.kernels import int8_conv
from glow_cpu.kernels.int8_shape import Geometry
from glow_cpu.loops import I8, I16, I32, for_range, i32, i64

CHUNK = 16
"""Outputs of a row computed together (two 8-lane int32 accumulators, ymm on AVX2)."""
HALF = CHUNK // 2
"""Outputs per ``madd`` (8 int32 lanes: one ``vpmaddwd`` on AVX2)."""
_V_I16 = ir.VectorType(I16, CHUNK)
_V_HALF_I32 = ir.VectorType(I32, HALF)


def emit_depthwise(k: Kernel, g: Geometry) -> None:
    """The QuantizedConv ``g`` (``cin_g == cout_g == 1``) into ``k.dest``; threads take whole
    (image, channel) planes."""
    b = k.b
    dest, (x, filter, bias, multiplier) = k.dest, k.sources
    k.work = max(k.work, g.n * g.positions * g.cout * g.kh * g.kw // 4)
    sh, sw = g.strides
    dh, dw = g.dilations
    phase_plane = _phase_plane(g)
    reach = sh * sw * phase_plane + g.grid_width + CHUNK + g.kw * dw  # with the last reads' slack
    pair_count = -(-reach // CHUNK) * CHUNK  # pairs (P[i], P[i + 1]) built per plane
    elements = pair_count + 2 * CHUNK  # of P, which the pairs read one past
    planes = k.private_scratch(elements * 2)
    pairs = k.private_scratch(pair_count * 4)
    start, stop = k.split(g.n * g.cout)
    with for_range(b, stop, start, name="unit", vectorize=False) as unit:
        channel = b.urem(unit, i64(g.cout))
        source = b.gep(x.ptr, [b.mul(unit, i64(g.h * g.w))], inbounds=True, source_etype=I8)
        _center_phases(k, g, x.elem, source, planes, elements)
        _neighbour_pairs(b, planes, pairs, pair_count)
        taps = b.gep(filter.ptr, [b.mul(channel, i64(g.kh * g.kw))], inbounds=True, source_etype=I8)
        weights = [b.sext(b.load(_at(b, taps, i64(t), I8), typ=I8), I16) for t in range(g.kh * g.kw)]
        reads = []  # per tap: its phase plane's offset plus its row and column shift
        for ky in range(g.kh):
            for kx in range(g.kw):
                phase = (ky * dh % sh) * sw + kx * dw % sw
                reads.append(phase * phase_plane + (ky * dh // sh) * g.grid_width + kx * dw // sw)
        steps = [(read, _weight_pair(b, weights, first, second)) for read, first, second in _pair_taps(reads)]
        shift = int8_conv._channel_shift(b, bias, multiplier, channel, None, 0)
        out_plane = b.mul(unit, i64(g.positions))
        with for_range(b, g.oh, name="oy", vectorize=False) as oy:
            row = b.mul(oy, i64(g.grid_width))
            out_row = b.add(out_plane, b.mul(oy, i64(g.ow)))

            def chunk(x0: ir.Value, lanes: int) -> None:
                at = b.add(row, x0)
                count = 1 if lanes <= HALF else 2  # a short last chunk (7x7 planes): one half
                halves = [ir.Constant(_V_HALF_I32, [0] * HALF)] * count
                for read, w in steps:
                    for h in range(count):
                        index = b.mul(b.add(at, i64(read + h * HALF)), i64(2))
                        values = b.load(_at(b, pairs, index, I16), typ=_V_I16, align=4)
                        halves[h] = b.add(halves[h], int8_conv.madd(b, values, w))
                acc = halves[0]
                if count == 2:
                    acc = b.shuffle_vector(
                        *halves, ir.Constant(ir.VectorType(I32, CHUNK), list(range(CHUNK)))
                    )
                narrow = int8_conv.requantize(k, acc, *shift)
                _store_first(b, narrow, b.gep(dest.ptr, [b.add(out_row, x0)], source_etype=I8), lanes)

            with for_range(b, g.ow // CHUNK, name="chunk", vectorize=False) as c:
                chunk(b.mul(c, i64(CHUNK)), CHUNK)
            if g.ow % CHUNK:
                chunk(i64(g.ow // CHUNK * CHUNK), g.ow % CHUNK)


def _pair_taps(reads: list[int]) -> list[tuple[int, int, int | None]]:
    """The taps as ``madd`` steps ``(read, first tap, second tap or None)``: two taps whose
    reads are neighbours (the same phase row, columns c and c + 1) share one step on the
    pair (P[c], P[c + 1]); a tap left alone pairs with weight 0. A 3x3 stride-1 or -2
    window takes 6 steps instead of 9 products."""
    order = sorted(range(len(reads)), key=lambda t: reads[t])
    steps, taken = [], set()
    for t in order:
        if t in taken:
            continue
        taken.add(t)
        partner = next((u for u in order if u not in taken and reads[u] == reads[t] + 1), None)
        if partner is not None:
            taken.add(partner)
        steps.append((reads[t], t, partner))
    return steps


def _weight_pair(b: ir.IRBuilder, weights: list[ir.Value], first: int, second: int | None) -> ir.Value:
    """(w[first], w[second] or 0) in every pair of 16 int16 lanes."""
    pair = b.insert_element(ir.Constant(_V_I16, [0] * CHUNK), weights[first], i32(0))
    if second is not None:
        pair = b.insert_element(pair, weights[second], i32(1))
    return b.shuffle_vector(pair, pair, ir.Constant(ir.VectorType(I32, CHUNK), [0, 1] * HALF))


def _neighbour_pairs(b: ir.IRBuilder, planes: ir.Value, pairs: ir.Value, count: int) -> None:
    """pairs[i] = (P[i], P[i + 1]) for i < ``count``: a tap at column c and its neighbour
    at c + 1 in one ``madd`` operand (flat over the planes: a pair across a row's end is
    only read with weight 0 on its second half)."""
    interleave = ir.Constant(
        ir.VectorType(I32, 2 * CHUNK), [q // 2 + (q % 2) * CHUNK for q in range(2 * CHUNK)]
    )
    with for_range(b, count // CHUNK, name="pair", vectorize=False) as i:
        first = b.mul(i, i64(CHUNK))
        here = b.load(_at(b, planes, first, I16), typ=_V_I16, align=2)
        after = b.load(_at(b, planes, b.add(first, i64(1)), I16), typ=_V_I16, align=2)
        both = b.shuffle_vector(here, after, interleave)
        b.store(both, _at(b, pairs, b.mul(first, i64(2)), I16), align=4)


def _phase_plane(g: Geometry) -> int:
    """int16 elements of one phase plane in the scratch: its rows, and the slack the last
    row's partial copy run may write zeros into (``_center_phases``)."""
    return g.phase_rows * g.grid_width + 2 * CHUNK + g.pads[1]


def _store_first(b: ir.IRBuilder, narrow: ir.Value, pointer: ir.Value, lanes: int) -> None:
    """The first ``lanes`` (a constant) bytes of ``narrow`` at ``pointer``: whole, or in
    pieces of 8, 4, 2 and 1 lanes (no branch, no byte-masked store on AVX2)."""
    if lanes == narrow.type.count:
        b.store(narrow, pointer, align=1)
        return
    done = 0
    for size in (8, 4, 2, 1):
        if lanes - done >= size:
            piece = b.shuffle_vector(
                narrow, narrow, ir.Constant(ir.VectorType(I32, size), list(range(done, done + size)))
            )
            b.store(piece, b.gep(pointer, [i64(done)], source_etype=I8), align=1)
            done += size


def _at(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
    return b.gep(ptr, [index], inbounds=True, source_etype=ty)


def _center_phases(k: Kernel, g: Geometry, kind: ElemKind, source, planes, elements: int) -> None:
    """Plane ``source`` into ``planes``: zeroed (the padding, centered), then each input row
    widened, centered and split by column phase into its row of the phase planes."""
    b = k.b
    offset = k.attrs["input_offset"]
    sh, sw = g.strides
    top, left = g.pads[0], g.pads[1]
    zero = ir.Constant(_V_I16, [0] * CHUNK)
    whole = elements // CHUNK
    with for_range(b, whole, name="zero", vectorize=False) as i:
        b.store(zero, _at(b, planes, b.mul(i, i64(CHUNK)), I16), align=2)
    for i in range(whole * CHUNK, elements):
        b.store(ir.Constant(I16, 0), _at(b, planes, i64(i), I16))
    span = CHUNK * sw  # input bytes per step: CHUNK of each column phase
    wide = ir.VectorType(I16, span)
    centered = ir.Constant(wide, [offset] * span)
    phase_plane = _phase_plane(g)
    runs, rest = divmod(g.w, span)

    def copy_run(row: ir.Value, line: ir.Value, run: ir.Value, lanes: int) -> None:
        """Input columns ``run * span ...`` (``lanes`` of them, the others read as padding:
        0) into their phase rows. A partial run writes zeros past the row's last column: its
        right padding, then the left of the phase plane's next row, which is padding or is
        written after this one (rows go top to bottom; each plane has slack after it)."""
        raw = b.load(_at(b, row, b.mul(run, i64(span)), I8), typ=ir.VectorType(I8, span), align=1)
        values = b.sub(b.zext(raw, wide) if kind is ElemKind.uint8 else b.sext(raw, wide), centered)
        if lanes < span:
            keep = ir.Constant(ir.VectorType(ir.IntType(1), span), [int(q < lanes) for q in range(span)])
            values = b.select(keep, values, ir.Constant(wide, [0] * span))
        for lane in range(sw):  # input lanes lane, lane + sw, ...: one column phase
            e, start = (lane + left) % sw, (lane + left) // sw
            if sw == 1:
                part = values
            else:
                order = ir.Constant(ir.VectorType(I32, CHUNK), [lane + sw * q for q in range(CHUNK)])
                part = b.shuffle_vector(values, values, order)
            column = b.add(b.mul(run, i64(CHUNK)), i64(start))
            target = b.add(b.add(line, i64(e * phase_plane)), column)
            b.store(part, _at(b, planes, target, I16), align=2)

    with for_range(b, g.h, name="iy", vectorize=False) as iy:
        padded = b.add(iy, i64(top))
        a, y = b.urem(padded, i64(sh)), b.udiv(padded, i64(sh))
        line = b.add(b.mul(a, i64(sw * phase_plane)), b.mul(y, i64(g.grid_width)))
        row = b.gep(source, [b.mul(iy, i64(g.w))], inbounds=True, source_etype=I8)
        with for_range(b, runs, name="run", vectorize=False) as run:
            copy_run(row, line, run, span)
        if rest:  # the partial run as a vector where its whole span lies inside the input plane
            inside = b.icmp_unsigned("<=", b.add(b.mul(iy, i64(g.w)), i64((runs + 1) * span)), i64(g.h * g.w))
            with b.if_else(inside) as (vector, scalar):
                with vector:
                    copy_run(row, line, i64(runs), rest)
                with scalar, for_range(b, g.w, runs * span, name="rest", vectorize=False) as ix:
                    value = int8_conv._widen(b, b.load(_at(b, row, ix, I8), typ=I8), kind)
                    padded_x = b.add(ix, i64(left))
                    e, column = b.urem(padded_x, i64(sw)), b.udiv(padded_x, i64(sw))
                    target = b.add(b.add(line, b.mul(e, i64(phase_plane))), column)
                    b.store(b.sub(value, ir.Constant(I16, offset)), _at(b, planes, target, I16))
