"""int8 dense layers (QuantizedFullyConnected), exact: one input row against the weights,
the output channels across the vector lanes.

The convolution kernel (``int8_conv.py``) tiles output *positions* across its lanes; a
dense layer has one position per image, so that kernel filled 1 lane of 16 and computed the
other 15 for nothing (MobileNetV2's 1280 x 1000 classifier: 0.37 ms of a 11 ms run). Here
the lanes hold output *channels* instead, which the packed panels put side by side:
``int8_fc_byte_pairs`` with ``CHANNELS`` channels per panel holds, per step of K, every
channel's pair (w[k], w[k+1]) in a row, as int8 (the matrix is read once per image, so its
bytes, not the arithmetic, bound the layer; the pairs are widened to int16 as they are
loaded), i.e. ``CHANNELS / LANES`` vectors of ``LANES`` channels; ``int8_fc_quad_panels``
the same with quads. Per step of K the image's pair (or quad) of inputs is broadcast to
every lane and multiplied with each weight vector (``madd`` or ``dot4``) into one
accumulator per vector. The epilogue is the convolution's, lane by lane: ``(acc + bias -
o_x * sum(w)) * multiplier`` in float64, ``round_to_output`` (the reference's rounding,
exact), with each channel's bias, weight sum and multiplier loaded as vectors.

Threads take (image, panel) units. The inputs are read in place: a step reads ``width``
adjacent bytes of the row, and a K that is not a multiple of ``width`` ends in a step built
from the row's last bytes and zeros (never a read past the row).
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel
from glow_cpu.kernels import int8_conv
from glow_cpu.kernels.int8_dot import dot4
from glow_cpu.kernels.int8_shape import LANES, NR, QUAD, Geometry, fits_int32
from glow_cpu.loops import F64, I8, I16, I32, carried_loop, for_range, i32, i64

CHANNELS = 32
"""Output channels per panel: 4 accumulators of 8 int32 lanes (pairs) or 2 of 16 (quads),
sharing each broadcast input step."""


def lanes_per_vector(width: int) -> int:
    """int32 lanes of one accumulator: ``LANES`` for the pairs (a ymm), ``NR`` for the quads
    (a zmm, one ``vpdpbusd``)."""
    return NR if width == QUAD else LANES


def emit_dense(k: Kernel, g: Geometry, packer: str, input_offset: int) -> None:
    """QuantizedFullyConnected ``g`` (``n`` images, K = ``g.c``, ``g.cout`` channels) into
    ``k.dest``, the weights packed by ``packer`` with ``mr=CHANNELS``; ``input_offset`` is the
    input's zero point as the layout reads it (shifted by 128 for int8 inputs in quads)."""
    assert fits_int32(g.depth, k.types[1].elem), f"{k.instr.kind}: K={g.depth} may overflow int32"
    b = k.b
    dest, (x, _, bias, multiplier) = k.dest, k.sources
    quads = g.width == QUAD
    lanes = lanes_per_vector(g.width)
    vectors = CHANNELS // lanes
    acc_type = ir.VectorType(I32, lanes)
    k.work = max(k.work, g.n * g.cout * g.depth // 16)
    packed = k.pack(2, packer, mr=CHANNELS)
    panels = -(-g.cout // CHANNELS)
    panel_bytes = g.steps * CHANNELS * g.width  # a pair or a quad of int8 weights per channel and step
    sums = b.gep(packed, [i64(panels * panel_bytes)], source_etype=I8)
    whole_steps = g.depth // g.width
    start, stop = k.split(g.n * panels)
    with for_range(b, stop, start, name="unit", vectorize=False) as unit:
        image, panel = b.udiv(unit, i64(panels)), b.urem(unit, i64(panels))
        row = b.gep(x.ptr, [b.mul(image, i64(g.depth))], inbounds=True, source_etype=I8)
        weights = b.gep(packed, [b.mul(panel, i64(panel_bytes))], inbounds=True, source_etype=I8)

        def step(s: ir.Value, accs: list[ir.Value], inputs: ir.Value | None = None) -> list[ir.Value]:
            if inputs is None:
                raw = b.load(_at(b, row, b.mul(s, i64(g.width)), I8), typ=ir.VectorType(I8, g.width), align=1)
                inputs = _as_operand(b, raw, x.elem, quads)
            spread = int8_conv._splat(b, inputs, acc_type)
            at = b.mul(s, i64(CHANNELS))
            out = []
            for v, acc in enumerate(accs):
                if quads:
                    w = b.load(_at(b, weights, b.add(at, i64(v * lanes)), I32), typ=acc_type, align=4)
                    out.append(dot4(b, acc, spread, w))
                else:  # int8 pairs widened to int16 as they are loaded
                    pairs = ir.VectorType(I16, 2 * lanes)
                    at_bytes = b.mul(b.add(at, i64(v * lanes)), i64(2))
                    raw = b.load(_at(b, weights, at_bytes, I8), typ=ir.VectorType(I8, 2 * lanes), align=2)
                    w = b.sext(raw, pairs)
                    out.append(b.add(acc, int8_conv.madd(b, b.bitcast(spread, pairs), w)))
            return out

        zero = ir.Constant(acc_type, [0] * lanes)
        accs = carried_loop(b, i64(0), i64(whole_steps), [zero] * vectors, step)
        if g.steps > whole_steps:  # the row's last depth % width bytes, then zeros
            last = ir.Constant(ir.VectorType(I8, g.width), None)
            for i in range(g.width):
                value = ir.Constant(I8, 0)
                if whole_steps * g.width + i < g.depth:
                    value = b.load(_at(b, row, i64(whole_steps * g.width + i), I8), typ=I8)
                last = b.insert_element(last, value, i32(i))
            accs = step(i64(whole_steps), accs, _as_operand(b, last, x.elem, quads))
        for v, acc in enumerate(accs):
            first = b.add(b.mul(panel, i64(CHANNELS)), i64(v * lanes))
            out = b.add(b.mul(image, i64(g.cout)), first)
            whole = b.icmp_signed("<=", b.add(first, i64(lanes)), i64(g.cout))
            with b.if_else(whole) as (full, partial):
                with full:
                    narrow = _requantize_lanes(k, acc, first, sums, bias, multiplier, input_offset)
                    b.store(narrow, _at(b, dest.ptr, out, I8), align=1)
                with partial:  # the last panel's channels past cout: computed on zero weights, dropped
                    for lane in range(lanes):
                        channel = b.add(first, i64(lane))
                        with b.if_then(b.icmp_signed("<", channel, i64(g.cout))):
                            weight_sum = b.load(_at(b, sums, channel, I32), typ=I32)
                            shift = int8_conv._channel_shift(
                                b, bias, multiplier, channel, weight_sum, input_offset
                            )
                            value = int8_conv.requantize(k, b.extract_element(acc, i32(lane)), *shift)
                            b.store(value, _at(b, dest.ptr, b.add(out, i64(lane)), I8))


def _as_operand(b: ir.IRBuilder, raw: ir.Value, kind: ElemKind, quads: bool) -> ir.Value:
    """``width`` input bytes as the int32 the step broadcasts: int16 pairs (widened by the
    input's kind) or uint8 quads (an int8 input's sign bit flipped: + 128). Padding bytes
    past K meet zero weights, so their value does not matter."""
    width = raw.type.count
    if quads:
        if kind is not ElemKind.uint8:
            raw = b.xor(raw, ir.Constant(ir.VectorType(I8, width), [-128] * width))
        return b.bitcast(raw, I32)
    wide = ir.VectorType(I16, width)
    widened = b.zext(raw, wide) if kind is ElemKind.uint8 else b.sext(raw, wide)
    return b.bitcast(widened, I32)


def _requantize_lanes(k: Kernel, acc, first, sums, bias, multiplier, offset: int) -> ir.Value:
    """Channels ``first ...`` (one per lane of ``acc``) requantized: the convolution's
    ``_channel_shift`` and ``requantize`` with vectors of biases, weight sums and multipliers."""
    b = k.b
    lanes = acc.type.count
    wide = ir.VectorType(F64, lanes)
    ints = ir.VectorType(I32, lanes)
    shift = b.sitofp(b.load(_at(b, bias.ptr, first, I32), typ=ints, align=4), wide)
    if offset:
        weight_sum = b.sitofp(b.load(_at(b, sums, first, I32), typ=ints, align=4), wide)
        shift = b.fsub(shift, b.fmul(weight_sum, ir.Constant(wide, [float(offset)] * lanes)))
    scale = b.load(_at(b, multiplier.ptr, first, F64), typ=wide, align=8)
    return int8_conv.round_to_output(k, b.fmul(b.fadd(b.sitofp(acc, wide), shift), scale))


def _at(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, ty: ir.Type) -> ir.Value:
    return b.gep(ptr, [index], inbounds=True, source_etype=ty)
