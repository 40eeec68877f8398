"""Integer layers: int8/uint8 convolution and dense layers with int32 accumulation, and
the requantizing residual sum (``QuantizedAdd``, documented on its class).

The quantize pass (``glow_core.quantization.convert``) and the QDQ fold
(``glow_core.passes.fold_qdq``) build these, so a backend with int8 kernels can keep them
whole (``should_lower`` False) and every other backend gets their lowering: the exact
integer arithmetic in float64 primitives, which is also the reference a kept kernel must
match bit for bit:

    acc = sum((input - input_offset) * filter) + bias        (an integer, exact in float64)
    out = clip(round_half_even(acc * multiplier) + output_offset, low, high)

``multiplier`` is per output channel (``s_in * s_w[c] / s_out``), ``bias`` the float bias
at the accumulator's scale in int32, weights are symmetric (no filter offset). ``low`` and
``high`` are the output kind's range, raised to the output offset by a fused ReLU.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.graph.nodes.linear_quant import dequantize, quantize, round_half_even
from glow_core.spec import Attr, In, ex, expect, node
from glow_core.types import ElemKind, Type

QUANTIZED_KINDS = frozenset({ElemKind.int8, ElemKind.uint8})
"""Element kinds of quantized activations (results and inputs of these layers)."""


def requantized_output(
    scale: float, offset: int, kind: ElemKind, low: float = -math.inf, high: float = math.inf
) -> dict[str, object]:
    """The output attributes of an integer layer (``output_offset``, ``output_kind``,
    ``low``, ``high``) that requantizes to ``(scale, offset)`` in ``kind`` and then clamps
    the real value to ``[low, high]`` (a fused Relu is ``low=0``, a Clip its bounds).

    Quantization is monotone, so clamping the real value is clamping the integer to the
    quantized bounds, rounded as the values are (half to even) and held in the kind's range.
    The quantize pass and the QDQ fold both build these layers; this is their one rule."""
    info = np.iinfo(kind.dtype)

    def bound(real: float, limit: int, pick) -> int:
        return limit if not math.isfinite(real) else int(pick(limit, np.rint(real / scale) + offset))

    return {
        "output_offset": int(offset),
        "output_kind": kind.name,
        "low": bound(low, int(info.min), max),
        "high": bound(high, int(info.max), min),
    }


def _check_operands(input: Type, filter: Type, bias: Type, multiplier: Type, output_kind: str) -> ElemKind:
    expect(input.elem in QUANTIZED_KINDS, "the input must be int8 or uint8", input)
    expect(filter.elem is ElemKind.int8, "the weights must be int8", filter)
    expect(bias.elem is ElemKind.int32, "the bias must be int32", bias)
    expect(multiplier.elem is ElemKind.float64, "the multiplier must be float64", multiplier)
    expect(output_kind in ("int8", "uint8"), f"output_kind {output_kind!r} is not int8 or uint8", input)
    return ElemKind[output_kind]


def _check_range(out: ElemKind, low: int, high: int, offset: int, input_offset: int, input: Type) -> None:
    info = np.iinfo(out.dtype)
    expect(info.min <= low <= high <= info.max, f"[{low}, {high}] is not a range of {out.name}", input)
    expect(info.min <= offset <= info.max, f"output_offset {offset} is not a {out.name}", input)
    source = np.iinfo(input.dtype)
    expect(source.min <= input_offset <= source.max, f"input_offset {input_offset} is not in range", input)


def _requantize(b, acc, bias, multiplier, channel_axis, output_offset, output_kind, low, high):
    """``acc`` (float64, exact) + bias, times the per-channel multiplier, rounded half to
    even, offset, clamped and stored in ``output_kind``."""
    shape = [1] * acc.type.rank
    shape[channel_axis] = bias.type.shape[0]
    wide = b.Convert(bias, elem="float64")
    acc = b.Add(acc, b.broadcast_to(b.Reshape(wide, shape=tuple(shape)), acc.type.shape))
    scaled = b.Mul(acc, b.broadcast_to(b.Reshape(multiplier, shape=tuple(shape)), acc.type.shape))
    rounded = round_half_even(b, scaled)
    if output_offset:
        rounded = b.Add(rounded, b.splat(float(output_offset), rounded))
    return b.Convert(b.Clip(rounded, low=float(low), high=float(high)), elem=output_kind)


def _centered(b, q, offset):
    x = b.Convert(q, elem="float64")
    return b.Sub(x, b.splat(float(offset), x)) if offset else x


def _sample_layer(rng, input, filter, bias, multiplier, **attrs):
    """Full-range integers and a multiplier that spreads the results over the output range
    (random multipliers would saturate nearly every output and test little)."""
    from glow_core.spec import random_tensor

    def full(t: Type) -> np.ndarray:
        info = np.iinfo(t.dtype)
        return rng.integers(info.min, int(info.max) + 1, t.shape).astype(t.dtype)

    depth = max(int(np.prod(filter.shape[1:])) if filter.rank == 4 else filter.shape[0], 1)
    scale = 40.0 / (np.sqrt(depth) * 75.0 * 75.0)  # full-range int8 products have std ~75*75
    return [
        full(input),
        full(filter),
        (random_tensor(rng, bias).astype(np.int64) * 200).astype(np.int32),
        rng.uniform(0.5, 2.0, multiplier.shape) * scale,
    ]


class _Requantized:
    """What the integer layers share: the zero points, the output kind and the saturation
    bounds of their requantization, their element kinds and their sample operands. A plain
    base class, not an operator, as the pools share ``_Window``. ``@node`` reads the bases
    in reverse method-resolution order, the last-listed first: ``QuantizedConv`` lists
    ``_Window2d`` after this base so that its window attributes keep their place ahead of
    these (the declared order the text format and the hashes rely on)."""

    input_offset = Attr(int, 0, "the input's zero point")
    output_offset = Attr(int, 0, "the result's zero point")
    output_kind = Attr(str, "int8", "int8 or uint8")
    low = Attr(int, -128, "saturation bounds in the output kind (a fused ReLU raises low)")
    high = Attr(int, 127)
    kinds = QUANTIZED_KINDS
    sample = _sample_layer


class _Window2d:
    """A 2-D convolution's window attributes (NCHW)."""

    strides = Attr(tuple, (1, 1))
    pads = Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right")
    dilations = Attr(tuple, (1, 1))
    group = Attr(int, 1)


@node
class QuantizedConv(_Requantized, _Window2d):
    """Integer 2-D convolution (NCHW; filter [Cout, Cin/group, kh, kw]) with int32
    accumulation, per-channel requantization and saturation: see the module docstring."""

    input = In()
    filter = In()
    bias = In()
    multiplier = In()
    examples = (
        ex(
            "i8[1,3,8,8]",
            "i8[4,3,3,3]",
            "i32[4]",
            "f64[4]",
            pads=(1, 1, 1, 1),
            input_offset=-7,
            output_offset=5,
        ),
        ex("i8[1,19,7,7]", "i8[21,19,1,1]", "i32[21]", "f64[21]", input_offset=3, low=5),
        ex("i8[2,4,9,7]", "i8[6,2,3,2]", "i32[6]", "f64[6]", strides=(2, 1), group=2),
        ex("i8[1,8,6,6]", "i8[8,1,3,3]", "i32[8]", "f64[8]", pads=(1, 1, 1, 1), group=8, output_offset=-3),
        ex(
            "u8[1,5,7,6]",
            "i8[9,5,3,3]",
            "i32[9]",
            "f64[9]",
            strides=(2, 2),
            pads=(0, 1, 1, 0),
            input_offset=128,
        ),
    )

    def type(input, filter, bias, multiplier, strides, pads, dilations, group, input_offset, output_offset,
             output_kind, low, high):  # fmt: skip
        from glow_core.primitives import Convolution

        out = _check_operands(input, filter, bias, multiplier, output_kind)
        _check_range(out, low, high, output_offset, input_offset, input)
        shape = Convolution.type_rule(input, filter.with_elem(input.elem), strides, pads, dilations, group)
        expect(bias.shape == (filter.shape[0],), "bias must be [Cout]", bias, filter)
        expect(multiplier.shape == (filter.shape[0],), "multiplier must be [Cout]", multiplier, filter)
        return shape.with_elem(out)

    def lower(b, input, filter, bias, multiplier, strides, pads, dilations, group, input_offset,
              output_offset, output_kind, low, high):  # fmt: skip
        acc = b.Convolution(
            _centered(b, input, input_offset),
            b.Convert(filter, elem="float64"),
            strides=strides,
            pads=pads,
            dilations=dilations,
            group=group,
        )
        return _requantize(b, acc, bias, multiplier, 1, output_offset, output_kind, low, high)


@node
class QuantizedFullyConnected(_Requantized):
    """Integer dense layer: input[n,k] @ weights[k,m] with int32 accumulation, per-column
    requantization and saturation: see the module docstring."""

    input = In()
    weights = In()
    bias = In()
    multiplier = In()
    examples = (
        ex("i8[2,37]", "i8[37,19]", "i32[19]", "f64[19]", input_offset=-4, output_offset=9),
        ex(
            "u8[1,64]",
            "i8[64,33]",
            "i32[33]",
            "f64[33]",
            input_offset=120,
            output_kind="uint8",
            low=0,
            high=255,
        ),
        ex("i8[5,1]", "i8[1,8]", "i32[8]", "f64[8]", low=0),
    )

    def type(input, weights, bias, multiplier, input_offset, output_offset, output_kind, low, high):
        out = _check_operands(input, weights, bias, multiplier, output_kind)
        _check_range(out, low, high, output_offset, input_offset, input)
        expect(input.rank == 2 and weights.rank == 2, "input and weights must be 2-D", input, weights)
        expect(input.shape[1] == weights.shape[0], "inner dimensions differ", input, weights)
        expect(bias.shape == (weights.shape[1],), "bias must be [m]", bias, weights)
        expect(multiplier.shape == (weights.shape[1],), "multiplier must be [m]", multiplier, weights)
        return input.with_shape((input.shape[0], weights.shape[1])).with_elem(out)

    def lower(b, input, weights, bias, multiplier, input_offset, output_offset, output_kind, low, high):
        acc = b.MatMul(_centered(b, input, input_offset), b.Convert(weights, elem="float64"))
        return _requantize(b, acc, bias, multiplier, 1, output_offset, output_kind, low, high)


def _sample_add(rng, lhs, rhs, **attrs):
    """Full-range integers of each operand's kind."""
    del attrs
    return [
        rng.integers(np.iinfo(t.dtype).min, int(np.iinfo(t.dtype).max) + 1, t.shape).astype(t.dtype)
        for t in (lhs, rhs)
    ]


@node
class QuantizedAdd:
    """Integer element-wise sum of two quantized tensors of one shape, requantized to the
    result's scale, with saturation (a fused ReLU raises ``low`` to the output offset):

        out = clip(round_half_even((lhs - lhs_offset) * lhs_multiplier
                                   + (rhs - rhs_offset) * rhs_multiplier) + output_offset, low, high)

    in float64, in that order (``lhs_multiplier`` is ``s_lhs / s_out``): the residual Add of
    a QDQ model (DequantizeLinear x2 -> Add [-> Relu] -> QuantizeLinear) with no float
    tensor in between. Each product and the sum round once in float64, so a kernel that does
    the same three operations in the same order is bit-equal to this lowering."""

    lhs = In()
    rhs = In()
    lhs_multiplier = Attr(float, 1.0, "s_lhs / s_out")
    rhs_multiplier = Attr(float, 1.0, "s_rhs / s_out")
    lhs_offset = Attr(int, 0, "the left operand's zero point")
    rhs_offset = Attr(int, 0, "the right operand's zero point")
    output_offset = Attr(int, 0, "the result's zero point")
    output_kind = Attr(str, "int8", "int8 or uint8")
    low = Attr(int, -128, "saturation bounds in the output kind (a fused ReLU raises low)")
    high = Attr(int, 127)
    kinds = QUANTIZED_KINDS
    sample = _sample_add
    examples = (
        ex(
            "i8[1,8,5,5]",
            "i8[1,8,5,5]",
            lhs_multiplier=0.61,
            rhs_multiplier=0.87,
            lhs_offset=-3,
            rhs_offset=4,
        ),
        ex("i8[37]", "i8[37]", lhs_multiplier=1.3, rhs_multiplier=0.45, output_offset=-9, low=-9),
        ex(
            "u8[2,3,7]",
            "i8[2,3,7]",
            lhs_multiplier=0.37,
            rhs_multiplier=0.52,
            lhs_offset=128,
            output_kind="uint8",
            output_offset=130,
            low=0,
            high=255,
        ),
    )

    def type(lhs, rhs, lhs_multiplier, rhs_multiplier, lhs_offset, rhs_offset, output_offset, output_kind,
             low, high):  # fmt: skip
        expect(lhs.elem in QUANTIZED_KINDS and rhs.elem in QUANTIZED_KINDS, "operands must be int8 or uint8",
               lhs, rhs)  # fmt: skip
        expect(lhs.shape == rhs.shape, "operands must have one shape", lhs, rhs)
        expect(output_kind in ("int8", "uint8"), f"output_kind {output_kind!r} is not int8 or uint8", lhs)
        out = ElemKind[output_kind]
        _check_range(out, low, high, output_offset, lhs_offset, lhs)
        _check_range(out, low, high, output_offset, rhs_offset, rhs)
        for m in (lhs_multiplier, rhs_multiplier):
            expect(np.isfinite(m), f"multiplier {m} is not finite", lhs)
        return lhs.with_elem(out)

    def lower(b, lhs, rhs, lhs_multiplier, rhs_multiplier, lhs_offset, rhs_offset, output_offset,
              output_kind, low, high):  # fmt: skip

        a = _centered(b, lhs, lhs_offset)
        c = _centered(b, rhs, rhs_offset)
        total = b.Add(b.Mul(a, b.splat(lhs_multiplier, a)), b.Mul(c, b.splat(rhs_multiplier, c)))
        rounded = round_half_even(b, total)
        if output_offset:
            rounded = b.Add(rounded, b.splat(float(output_offset), rounded))
        return b.Convert(b.Clip(rounded, low=float(low), high=float(high)), elem=output_kind)


# ---- the boundaries an imported QDQ model marks -------------------------------------------


def _check_scale(input: Type, scale: Type, zero_point: Type, axis: int) -> None:
    expect(scale.elem is ElemKind.float32, "the scale must be float32", scale)
    expect(zero_point.shape == scale.shape, "the zero point must have the scale's shape", zero_point, scale)
    per_axis = scale.rank == 1 and 0 <= axis < input.rank and scale.shape[0] == input.shape[axis]
    expect(scale.rank == 0 or per_axis, f"the scale is neither per tensor nor per axis {axis}", scale, input)


def _sample_boundary(rng, input, scale, zero_point, axis):
    from glow_core.spec import random_tensor

    return [random_tensor(rng, input), rng.uniform(0.01, 0.1, scale.shape).astype(np.float32),
            random_tensor(rng, zero_point)]  # fmt: skip


@node
class DequantizeLinear:
    """ONNX DequantizeLinear with a per-tensor or per-axis scale: (input - zero_point) *
    scale in float32. Kept as a node (not arithmetic) until lowering, so ``fold-qdq`` can
    see an imported QDQ model's integer layers."""

    input = In()
    scale = In()
    zero_point = In()
    axis = Attr(int, 1, "the channel axis of a per-axis scale")
    sample = _sample_boundary
    examples = (ex("i8[2,3,4]", "f32[]", "i8[]"), ex("i8[2,3,4]", "f32[3]", "i8[3]", axis=1))

    def type(input, scale, zero_point, axis):
        expect(
            input.elem in (*QUANTIZED_KINDS, ElemKind.int32), "the input must be int8, uint8 or int32", input
        )
        expect(zero_point.elem is input.elem, "the zero point must have the input's kind", zero_point, input)
        _check_scale(input, scale, zero_point, axis)
        return input.with_elem(ElemKind.float32)

    def lower(b, input, scale, zero_point, axis):
        return dequantize(b, input, scale, zero_point, axis, 0)


@node
class QuantizeLinear:
    """ONNX QuantizeLinear to int8/uint8 with a per-tensor scale: round half to even of
    input / scale, plus zero_point, saturated (a node until lowering, see DequantizeLinear)."""

    input = In()
    scale = In()
    zero_point = In()
    kinds = QUANTIZED_KINDS
    sample = lambda rng, input, scale, zero_point: _sample_boundary(rng, input, scale, zero_point, 0)  # noqa: E731
    examples = (ex("f32[2,3,4]", "f32[]", "i8[]"), ex("f32[5,7]", "f32[]", "u8[]"))

    def type(input, scale, zero_point):
        expect(input.elem is ElemKind.float32, "the input must be float32", input)
        expect(zero_point.elem in QUANTIZED_KINDS, "the zero point must be int8 or uint8", zero_point)
        expect(scale.rank == 0, "only a per-tensor scale", scale)
        _check_scale(input, scale, zero_point, 0)
        return input.with_elem(zero_point.elem)

    def lower(b, input, scale, zero_point):
        return quantize(b, input, scale, zero_point, zero_point.type.elem, 1, 0)
