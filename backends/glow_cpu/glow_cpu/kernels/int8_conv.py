"""int8 convolution and dense layers (QuantizedConv, QuantizedFullyConnected), exact.

Per image and group the output [Cout/g, OH*OW] is the filter [Cout/g, K] (K = Cin/g*kh*kw)
times the input seen as [K, OH*OW]. Both sides are int8/uint8; they are widened to int16 and
multiplied in *pairs* along K: lane ``l`` of ``madd(a, b)`` is ``a[2l]*b[2l] + a[2l+1]*b[2l+1]``
in int32, the operation of x86's ``pmaddwd`` (which LLVM selects for this IR on AVX2;
other targets get their own widening multiplies from the same IR). Every int8 x int8
product and every pair sum fits int16 x int16 -> int32, so, unlike ``pmaddubsw`` (int16
saturation), nothing can saturate;
a whole sum stays within int32 for K < 2**31 / (255 * 128) (``fits_int32``; a backend that
cannot prove it lowers the layer to the float64 reference). The tiling constants, a layer's
``Geometry`` and that check are the plan in ``int8_shape.py``.

- The filter is packed once, at compile time, into *panels* of ``MR`` output channels:
  for each pair of K, the ``MR`` (w[k], w[k+1]) int16 pairs side by side (``int8_panels``),
  followed by each channel's weight sum.
- The input is copied once per call, padded with its zero point, into stride-phase planes
  (``_split_phases``): for a tile of ``NR`` output positions every filter tap is then a
  contiguous run, widened into private scratch as int16 pairs (x[k][p], x[k+1][p]), the
  implicit im2col of one tile, reused by every output channel. A pointwise convolution (and
  a dense layer) reads its input in place; a depthwise one has a direct kernel of its own
  (``int8_depthwise.py``).
- The micro-kernel keeps ``MR`` x 2 accumulators of ``LANES`` int32 and, per pair of K,
  broadcasts one filter pair per channel against two vectors of input pairs.
- The epilogue is the requantization of the reference (``glow_core.graph.nodes.quantized``)
  in float64: ``(acc + bias - input_offset * weight_sum) * multiplier``, rounded half to
  even, offset, clamped, narrowed. All the terms are integers below 2**53, so this equals the
  reference's float64 arithmetic bit for bit.

Where the program chose the *quads* (``int8_dot.py``: a VNNI target, or the option) and the
weights are int8, the same kernel runs a second layout: the filter in quads along K
(``int8_quad_panels``), the tile as uint8 quads (x[k..k+3][p], an int8 input shifted by 128
and its zero point with it, so the epilogue's formula is unchanged), and a micro-kernel of
``quad_mr`` channels x ``quad_vectors`` accumulators of ``NR`` lanes (``quad_tile_positions``
outputs a tile) whose step is ``dot4`` (``vpdpbusd``).

``LANES`` is a generator parameter, not a target fact: LLVM splits or joins the vectors for
whatever target it compiles to (one ymm per accumulator on AVX2, two q registers on NEON).
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.graph.nodes.quantized import QUANTIZED_KINDS
from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, emits
from glow_cpu.kernels import int8_dense, int8_depthwise, int8_dot, int8_shape
from glow_cpu.kernels.int8_dot import dot4
from glow_cpu.kernels.int8_packing import (
    int8_fc_byte_pairs,
    int8_fc_quad_panels,
    int8_panels,
    int8_quad_panels,
)
from glow_cpu.kernels.int8_shape import LANES, MR, NR, PAIR, QUAD, Geometry, fits_int32
from glow_cpu.loops import F64, I8, I16, I32, carried_loop, for_range, i32, i64, loop_nest

_V_I32 = ir.VectorType(I32, LANES)
_V_I16 = ir.VectorType(I16, 2 * LANES)
_V_F64 = ir.VectorType(F64, LANES)
_V_NR_I32 = ir.VectorType(I32, NR)
UINT8_SHIFT = 128
"""What the quads add to an int8 input (and its zero point) to read it as uint8."""


# ---- IR helpers -------------------------------------------------------------------------


def _lanes(start: int, step: int, count: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, count), [start + step * i for i in range(count)])


def madd(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """int16 pairs -> int32: lane l is x[2l]*y[2l] + x[2l+1]*y[2l+1] (pmaddwd's meaning).

    Written as whole-vector products added pairwise, the shape LLVM's x86 backend selects
    ``vpmaddwd`` for (a form that multiplies the even and odd halves separately is not
    recognized once one operand is a broadcast); other targets get their own widening
    multiplies from the same IR."""
    wide = ir.VectorType(I32, 2 * LANES)
    products = b.mul(b.sext(x, wide), b.sext(y, wide))
    even, odd = (b.shuffle_vector(products, products, _lanes(first, 2, LANES)) for first in (0, 1))
    return b.add(even, odd)


def _splat(b: ir.IRBuilder, value: ir.Value, ty: ir.VectorType) -> ir.Value:
    one = b.insert_element(ir.Constant(ty, None), value, i32(0))
    return b.shuffle_vector(
        one, ir.Constant(ty, None), ir.Constant(ir.VectorType(I32, ty.count), [0] * ty.count)
    )


def _at(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
    return b.gep(ptr, [index], inbounds=True, source_etype=ty)


def _widen(b: ir.IRBuilder, raw: ir.Value, kind: ElemKind) -> ir.Value:
    return b.zext(raw, I16) if kind is ElemKind.uint8 else b.sext(raw, I16)


# ---- the kernel -------------------------------------------------------------------------


def _emit(k: Kernel, g: Geometry, packer: tuple[str, dict[str, int]]) -> None:
    """The kernel of one QuantizedConv / QuantizedFullyConnected on geometry ``g`` (whose
    ``width`` says pairs or quads, ``packer`` the matching panels)."""
    assert not k.epilogue, f"{k.instr.kind} cannot apply a fused epilogue"
    assert fits_int32(g.depth, k.types[1].elem), f"{k.instr.kind}: K={g.depth} may overflow int32"
    attrs = k.attrs
    k.work = max(k.work, g.n * g.positions * g.cout * g.depth // 16)
    planes = None
    if not g.pointwise:
        planes = k.shared_scratch(g.n * g.c * g.plane_bytes)
        _split_phases(k, g, planes, attrs["input_offset"])
        k.phase()
    b = k.b
    dest, (x, _, bias, multiplier) = k.dest, k.sources
    quads = g.width == QUAD
    # The quads read the input as uint8: an int8 input is shifted by 128 as it is gathered
    # (its padding included), so its zero point is too.
    input_offset = attrs["input_offset"] + (UINT8_SHIFT if quads and x.elem is not ElemKind.uint8 else 0)
    source = x.ptr if planes is None else k.shared(planes)
    packed = k.pack(2, packer[0], **packer[1])
    panel_bytes = g.steps * g.mr * 4  # one int32 (a pair or a quad of weights) per channel and step
    tile = k.private_scratch(g.steps * g.nr * 4)  # 4 bytes per position and step, both layouts
    sums = b.gep(packed, [i64(g.group * g.panels * panel_bytes)], source_etype=I8)
    start, stop = k.split(g.n * g.tiles)
    with for_range(b, stop, start, name="unit") as unit:
        image = b.udiv(unit, i64(g.tiles))
        first = b.mul(b.urem(unit, i64(g.tiles)), i64(g.nr))
        with for_range(b, g.group, name="group") as group:
            gather = _gather_quads if quads else _gather
            gather(k, g, x.elem, source, image, group, first, tile)
            with for_range(b, g.panels, name="panel") as panel:
                index = b.add(b.mul(group, i64(g.panels)), panel)
                weights = b.gep(packed, [b.mul(index, i64(panel_bytes))], source_etype=I8)
                rows = (_quad_micro_kernel if quads else _micro_kernel)(b, g, weights, tile)
                for r, halves in enumerate(rows):
                    row = b.add(b.mul(panel, i64(g.mr)), i64(r))
                    with b.if_then(b.icmp_signed("<", row, i64(g.cout_g))):
                        channel = b.add(b.mul(group, i64(g.cout_g)), row)
                        at = b.add(b.mul(index, i64(g.mr)), i64(r))
                        weight_sum = b.load(_at(b, sums, at, I32), typ=I32)
                        shift = _channel_shift(b, bias, multiplier, channel, weight_sum, input_offset)
                        row_start = b.mul(b.add(b.mul(image, i64(g.cout)), channel), i64(g.positions))
                        for j, half in enumerate(halves):
                            position = b.add(first, i64(j * LANES))
                            _store(k, g, dest, half, shift, row_start, position)


def _split_phases(k: Kernel, g: Geometry, planes: int, offset: int) -> None:
    """Copy every input channel, padded with the zero point, into stride-phase planes
    ``P[c, a, e, y, x] = Xpad[c, y*sh + a, x*sw + e]`` (one shared copy, threads taking
    channels). Filter tap (ky, kx) then reads, for grid position ``p = oy*grid_width + ox``,
    plane (ky*dh % sh, kx*dw % sw) at ``p + (ky*dh // sh)*grid_width + kx*dw // sw``: a
    contiguous run for a whole tile, whatever the stride."""
    b = k.b
    x = k.sources[0]
    out = k.shared(planes)
    sh, sw = g.strides
    width = g.grid_width
    start, stop = k.split(g.n * g.c)
    with for_range(b, stop, start, name="plane") as plane:
        source = b.gep(x.ptr, [b.mul(plane, i64(g.h * g.w))], inbounds=True, source_etype=I8)
        target = b.gep(out, [b.mul(plane, i64(g.plane_bytes))], inbounds=True, source_etype=I8)
        with loop_nest(b, (sh, sw, g.phase_rows), name="ph") as (a, e, y):
            iy = b.sub(b.add(b.mul(y, i64(sh)), a), i64(g.pads[0]))
            row_inside = b.icmp_unsigned("<", iy, i64(g.h))
            line = b.mul(b.add(b.mul(b.add(b.mul(a, i64(sw)), e), i64(g.phase_rows)), y), i64(width))
            with for_range(b, width, name="x") as column:
                ix = b.sub(b.add(b.mul(column, i64(sw)), e), i64(g.pads[1]))
                inside = b.and_(row_inside, b.icmp_unsigned("<", ix, i64(g.w)))
                at = b.select(inside, b.add(b.mul(iy, i64(g.w)), ix), i64(0))
                value = b.select(inside, b.load(_at(b, source, at, I8), typ=I8), ir.Constant(I8, offset))
                b.store(value, _at(b, target, b.add(line, column), I8))
        tail = sh * sw * g.phase_rows * width
        with for_range(b, g.plane_bytes, tail, name="slack") as i:
            b.store(ir.Constant(I8, offset), _at(b, target, i, I8))


def _gather(
    k: Kernel, g: Geometry, kind: ElemKind, source: ir.Value, image, group, first, tile: ir.Value
) -> None:
    """tile[p // 2][q][p % 2] = input column p at grid position first + q, as int16: a
    contiguous run of the input (pointwise) or of a stride-phase plane; pad rows of K are 0."""
    b = k.b
    if g.depth % 2:
        last = b.gep(tile, [i64((g.steps - 1) * 2 * NR + 1)], inbounds=True, source_etype=I16)
        with for_range(b, NR, name="q") as q:
            b.store(ir.Constant(I16, 0), _at(b, last, b.mul(q, i64(2)), I16))
    with loop_nest(b, (g.cin_g, g.kh, g.kw), name="tap") as (c, ky, kx):
        column = b.add(b.mul(b.add(b.mul(c, i64(g.kh)), ky), i64(g.kw)), kx)
        slot = b.add(b.mul(b.udiv(column, i64(2)), i64(2 * NR)), b.urem(column, i64(2)))
        run = _tap_run(k, g, source, image, group, c, ky, kx)
        _gather_run(b, g, kind, run, first, b.gep(tile, [slot], inbounds=True, source_etype=I16))


def _tap_run(k: Kernel, g: Geometry, source: ir.Value, image, group, c, ky, kx) -> ir.Value:
    """Where the run of input column (c, ky, kx) starts: grid position 0 of that tap, in the
    input itself (pointwise) or in its channel's stride-phase planes (``_split_phases``)."""
    b = k.b
    plane = g.h * g.w if g.pointwise else g.plane_bytes
    sh, sw = g.strides
    channel = b.add(b.mul(image, i64(g.c)), b.add(b.mul(group, i64(g.cin_g)), c))
    start = b.mul(channel, i64(plane))
    if not g.pointwise:
        dy, dx = b.mul(ky, i64(g.dilations[0])), b.mul(kx, i64(g.dilations[1]))
        phase = b.add(b.mul(b.urem(dy, i64(sh)), i64(sw)), b.urem(dx, i64(sw)))
        shift = b.add(b.mul(b.udiv(dy, i64(sh)), i64(g.grid_width)), b.udiv(dx, i64(sw)))
        start = b.add(start, b.add(b.mul(phase, i64(g.phase_rows * g.grid_width)), shift))
    return b.gep(source, [start], inbounds=True, source_etype=I8)


def _gather_run(b: ir.IRBuilder, g: Geometry, kind: ElemKind, run: ir.Value, first, out: ir.Value) -> None:
    """``NR`` contiguous values from ``run + first``, widened, into every other int16 of
    ``out``. A phase plane has slack past its end; the input read in place (pointwise) does
    not, so its last tile is clamped (the positions past the plane are never stored)."""
    whole = b.icmp_signed("<=", b.add(first, i64(NR)), i64(g.grid))
    with b.if_else(whole) as (full, partial):
        for branch, clamp in ((full, False), (partial, g.pointwise)):
            with branch, for_range(b, NR, name="q") as q:
                position = b.add(first, q)
                if clamp:
                    position = b.select(b.icmp_signed("<", position, i64(g.grid)), position, i64(0))
                value = _widen(b, b.load(_at(b, run, position, I8), typ=I8), kind)
                b.store(value, _at(b, out, b.mul(q, i64(2)), I16))


def _gather_quads(
    k: Kernel, g: Geometry, kind: ElemKind, source: ir.Value, image, group, first, tile: ir.Value
) -> None:
    """tile[p // 4][q][p % 4] = input column p at grid position first + q as uint8 (an int8
    input plus 128, i.e. its sign bit flipped): per quad of K, four runs of ``g.nr`` bytes
    loaded as vectors and interleaved. Columns past K (the last quad's, when K is not a
    multiple of 4) repeat column K-1: their weights are 0, so any byte would do, and that
    one is in bounds."""
    b = k.b
    taps = g.kh * g.kw
    nr = g.nr
    whole = b.icmp_signed("<=", b.add(first, i64(nr)), i64(g.grid))
    with b.if_else(whole) as (full, partial):
        for branch, clamp in ((full, False), (partial, g.pointwise)):
            with branch, for_range(b, g.steps, name="quad") as quad:
                runs = []
                for i in range(QUAD):
                    column = b.add(b.mul(quad, i64(QUAD)), i64(i))
                    if g.depth % QUAD and i:
                        column = b.select(b.icmp_signed("<", column, i64(g.depth)), column, i64(g.depth - 1))
                    c, tap = b.udiv(column, i64(taps)), b.urem(column, i64(taps))
                    ky, kx = b.udiv(tap, i64(g.kw)), b.urem(tap, i64(g.kw))
                    run = _tap_run(k, g, source, image, group, c, ky, kx)
                    runs.append(_load_run(b, g, run, first, clamp))
                ab = b.shuffle_vector(runs[0], runs[1], _lanes(0, 1, 2 * nr))
                cd = b.shuffle_vector(runs[2], runs[3], _lanes(0, 1, 2 * nr))
                order = [i * nr + q for q in range(nr) for i in range(QUAD)]
                interleaved = b.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(I32, QUAD * nr), order))
                if kind is not ElemKind.uint8:
                    sign = [UINT8_SHIFT - 256] * (QUAD * nr)  # 0x80 in every byte
                    flip = ir.Constant(ir.VectorType(I8, QUAD * nr), sign)
                    interleaved = b.xor(interleaved, flip)
                slot = b.gep(tile, [b.mul(quad, i64(QUAD * nr))], inbounds=True, source_etype=I8)
                b.store(interleaved, slot, align=4)


def _load_run(b: ir.IRBuilder, g: Geometry, run: ir.Value, first, clamp: bool) -> ir.Value:
    """The ``g.nr`` bytes at ``run + first`` as a vector; with ``clamp`` (the last tile of an
    input read in place) lane by lane, positions past the grid reading position 0."""
    if not clamp:
        return b.load(_at(b, run, first, I8), typ=ir.VectorType(I8, g.nr), align=1)
    vector = ir.Constant(ir.VectorType(I8, g.nr), None)
    for q in range(g.nr):
        position = b.add(first, i64(q))
        position = b.select(b.icmp_signed("<", position, i64(g.grid)), position, i64(0))
        vector = b.insert_element(vector, b.load(_at(b, run, position, I8), typ=I8), i32(q))
    return vector


def _micro_kernel(b: ir.IRBuilder, g: Geometry, weights: ir.Value, tile: ir.Value) -> list[list[ir.Value]]:
    """Per channel of the panel, its 2 accumulators of ``LANES`` int32 against the gathered
    tile of int16 pairs."""

    def step(pair: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        columns = b.gep(tile, [b.mul(pair, i64(2 * NR))], inbounds=True, source_etype=I16)
        halves = [b.load(_at(b, columns, i64(j * 2 * LANES), I16), typ=_V_I16) for j in range(2)]
        for h in halves:
            h.align = 2
        pairs = b.gep(weights, [b.mul(pair, i64(g.mr))], inbounds=True, source_etype=I32)
        out = []
        for r in range(g.mr):
            w = _splat(b, b.load(_at(b, pairs, i64(r), I32), typ=I32), _V_I32)
            w = b.bitcast(w, _V_I16)
            out += [b.add(accs[r * 2 + j], madd(b, w, halves[j])) for j in range(2)]
        return out

    zero = ir.Constant(_V_I32, [0] * LANES)
    accs = carried_loop(b, i64(0), i64(g.steps), [zero] * (2 * g.mr), step)
    return [accs[r * 2 : r * 2 + 2] for r in range(g.mr)]


def _quad_micro_kernel(
    b: ir.IRBuilder, g: Geometry, weights: ir.Value, tile: ir.Value
) -> list[list[ir.Value]]:
    """Per channel of the panel, ``g.nr // NR`` accumulators of ``NR`` int32 lanes against
    the gathered tile of uint8 quads: per quad of K, the channel's 4 weights (one int32)
    broadcast once and ``dot4`` with each of the tile's vectors of ``NR`` quads (one
    ``vpdpbusd`` each on AVX-512 VNNI). Returned as halves of ``LANES``, the epilogue's
    vectors, in position order."""
    vectors = g.nr // NR

    def step(quad: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        row = b.mul(quad, i64(g.nr))
        xs = [b.load(_at(b, tile, b.add(row, i64(v * NR)), I32), typ=_V_NR_I32) for v in range(vectors)]
        for x in xs:
            x.align = 4
        quads = b.gep(weights, [b.mul(quad, i64(g.mr))], inbounds=True, source_etype=I32)
        out = []
        for r in range(g.mr):
            w = _splat(b, b.load(_at(b, quads, i64(r), I32), typ=I32), _V_NR_I32)
            out += [dot4(b, accs[r * vectors + v], x, w) for v, x in enumerate(xs)]
        return out

    zero = ir.Constant(_V_NR_I32, [0] * NR)
    accs = carried_loop(b, i64(0), i64(g.steps), [zero] * (g.mr * vectors), step)
    return [
        [
            b.shuffle_vector(a, a, _lanes(j * LANES, 1, LANES))
            for a in accs[r * vectors : (r + 1) * vectors]
            for j in range(NR // LANES)
        ]
        for r in range(g.mr)
    ]


def _channel_shift(b, bias, multiplier, channel, weight_sum, offset: int) -> tuple[ir.Value, ir.Value]:
    """(bias - offset * weight_sum, multiplier) of ``channel`` as float64 (exact integers)."""
    wide_bias = b.sitofp(b.load(_at(b, bias.ptr, channel, I32), typ=I32), F64)
    if offset:
        wide_bias = b.fsub(wide_bias, b.fmul(b.sitofp(weight_sum, F64), ir.Constant(F64, float(offset))))
    return wide_bias, b.load(_at(b, multiplier.ptr, channel, F64), typ=F64)


def requantize(k: Kernel, acc: ir.Value, wide_bias: ir.Value, multiplier: ir.Value) -> ir.Value:
    """int32 accumulator(s) (a scalar or a vector) to the output kind: the reference's
    ``clip(round_half_even((acc + bias) * multiplier) + output_offset, low, high)`` in float64."""
    b = k.b
    lanes = acc.type.count if isinstance(acc.type, ir.VectorType) else None
    wide = ir.VectorType(F64, lanes) if lanes else F64

    def spread(v: ir.Value) -> ir.Value:
        return _splat(b, v, wide) if lanes else v

    value = b.fmul(b.fadd(b.sitofp(acc, wide), spread(wide_bias)), spread(multiplier))
    return round_to_output(k, value)


ROUNDING_BIAS = 1.5 * 2.0**52
"""Added to a float64 of magnitude below 2**51, it leaves the value rounded half to even
(by the addition itself) as an integer in the low bits of the sum's mantissa
(``round_to_output``)."""


def round_to_output(k: Kernel, value: ir.Value) -> ir.Value:
    """float64 value(s) (a scalar or a vector) to the output kind exactly as the reference:
    ``clip(round_half_even(value) + output_offset, low, high)``, narrowed to 8 bits.

    Done as ``n = clip(value, low - o, high - o) + 1.5 * 2**52``, whose low mantissa bits
    are the rounded integer, then ``o`` added to the narrowed bytes:

    - the bounds ``low - o`` and ``high - o`` are integers, so clamping before a monotone
      rounding that keeps integers gives what clamping after it gives;
    - the clamped value is below 2**9, so the sum lies in [2**52, 2**53), where float64's
      spacing is 1: the addition itself rounds, half to even (the default rounding mode;
      1.5 * 2**52 is even, so the parity of the tie's choice is the value's own);
    - that binade's mantissa holds ``n + 2**51``, whose low 8 bits are n's two's complement;
    - the offset is added after the rounding (folding it into the constant would move the
      ties: round_half_even(x + o) differs from round_half_even(x) + o for an odd o), in
      8-bit lanes, which wrap to the right byte because ``n + o`` lies in [low, high].

    Against ``roundeven`` + a float offset + the float-to-int conversion it saves a rounding
    and an addition per 4 float64 lanes on AVX2, where requantization is about half of a
    depthwise or small-K layer's arithmetic."""
    b, attrs = k.b, k.attrs
    lanes = value.type.count if isinstance(value.type, ir.VectorType) else None

    def const(ty: ir.Type, v: float | int) -> ir.Constant:
        return ir.Constant(ir.VectorType(ty, lanes), [v] * lanes) if lanes else ir.Constant(ty, v)

    offset = int(attrs["output_offset"])
    low, high = const(F64, float(attrs["low"] - offset)), const(F64, float(attrs["high"] - offset))
    value = b.select(b.fcmp_ordered("<", value, low), low, value)
    value = b.select(b.fcmp_ordered(">", value, high), high, value)
    value = b.fadd(value, const(F64, ROUNDING_BIAS))
    bits = b.bitcast(value, ir.VectorType(ir.IntType(64), lanes) if lanes else ir.IntType(64))
    narrow = b.trunc(bits, ir.VectorType(I8, lanes) if lanes else I8)
    if offset:
        narrow = b.add(narrow, const(I8, offset % 256))
    return narrow


def _store(k: Kernel, g: Geometry, dest, acc: ir.Value, shift, row: ir.Value, position: ir.Value) -> None:
    """Requantize ``LANES`` accumulators (positions ``position...``) and store those inside
    the plane at ``row`` (the output channel's first element)."""
    b = k.b
    narrow = requantize(k, acc, *shift)
    if g.grid_width == g.ow:
        _store_run(b, dest, narrow, b.add(row, position), b.sub(i64(g.positions), position))
        return
    # A grid row is wider than the output's: keep columns < ow, row by row.
    y, column = b.udiv(position, i64(g.grid_width)), b.urem(position, i64(g.grid_width))
    inside = b.icmp_signed("<", y, i64(g.oh))
    target = b.add(row, b.add(b.mul(y, i64(g.ow)), column))
    with b.if_else(b.and_(inside, b.icmp_signed("<=", b.add(column, i64(LANES)), i64(g.ow)))) as (run, split):
        with run:
            b.store(narrow, b.gep(dest.ptr, [target], source_etype=I8), align=1)
        with split:
            for lane in range(LANES):
                p = b.add(position, i64(lane))
                y, column = b.udiv(p, i64(g.grid_width)), b.urem(p, i64(g.grid_width))
                keep = b.and_(b.icmp_signed("<", y, i64(g.oh)), b.icmp_signed("<", column, i64(g.ow)))
                with b.if_then(keep):
                    at = b.add(row, b.add(b.mul(y, i64(g.ow)), column))
                    b.store(b.extract_element(narrow, i32(lane)), b.gep(dest.ptr, [at], source_etype=I8))


def _store_run(b: ir.IRBuilder, dest, narrow: ir.Value, at: ir.Value, remaining: ir.Value) -> None:
    """Store the lanes of ``narrow`` at ``at``, or only the first ``remaining`` of them."""
    lanes = narrow.type.count
    pointer = b.gep(dest.ptr, [at], source_etype=I8)
    with b.if_else(b.icmp_signed(">=", remaining, i64(lanes))) as (full, partial):
        with full:
            b.store(narrow, pointer, align=1)
        with partial:
            for lane in range(lanes):
                with b.if_then(b.icmp_signed(">", remaining, i64(lane))):
                    b.store(
                        b.extract_element(narrow, i32(lane)), b.gep(pointer, [i64(lane)], source_etype=I8)
                    )


# ---- emitters -----------------------------------------------------------------------------


def _layout(k: Kernel, filter_kind: ElemKind) -> tuple[int, int, int]:
    """(mr, width, nr) of this kernel: the quads where the program chose them (``int8_dot``)
    and the weights are signed (``vpdpbusd`` multiplies unsigned by signed bytes), the pairs
    otherwise. Reads the tile constants (``MR``, ``QUAD_MR``, ``QUAD_VECTORS``) at call time:
    bench/int8_tiles.py sets them."""
    if int8_dot.current().quads and filter_kind is ElemKind.int8:
        return int8_shape.quad_mr(k.accumulators), QUAD, int8_shape.quad_tile_positions(k.accumulators)
    return MR, PAIR, NR


@emits("QuantizedConv", kinds=QUANTIZED_KINDS)
def emit_quantized_conv(k: Kernel) -> None:
    out, x, f = k.types[0], k.types[1], k.types[2]
    a = k.attrs
    mr, width, nr = _layout(k, f.elem)
    g = Geometry(
        x.shape[0], x.shape[1], x.shape[2], x.shape[3], f.shape[0], f.shape[2], f.shape[3],
        out.shape[2], out.shape[3], a["strides"], a["pads"], a["dilations"], a["group"], mr, width, nr,
    )  # fmt: skip
    if g.cin_g == 1 and g.cout_g == 1:
        int8_depthwise.emit_depthwise(k, g)
    else:
        packer = int8_quad_panels if width == QUAD else int8_panels
        _emit(k, g, (packer.__name__, {"group": g.group, "mr": mr}))


@emits("QuantizedFullyConnected", kinds=QUANTIZED_KINDS)
def emit_quantized_fully_connected(k: Kernel) -> None:
    """The dense kernel (``int8_dense.py``: output channels across the lanes), in the layout
    the program chose (pairs or quads)."""
    assert not k.epilogue, f"{k.instr.kind} cannot apply a fused epilogue"
    x, w = k.types[1], k.types[2]
    _, width, _ = _layout(k, w.elem)
    g = Geometry(x.shape[0], x.shape[1], 1, 1, w.shape[1], 1, 1, 1, 1, mr=int8_dense.CHANNELS, width=width)
    quads = width == QUAD
    offset = k.attrs["input_offset"] + (UINT8_SHIFT if quads and x.elem is not ElemKind.uint8 else 0)
    packer = int8_fc_quad_panels if quads else int8_fc_byte_pairs
    int8_dense.emit_dense(k, g, packer.__name__, offset)
