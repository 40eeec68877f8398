"""Conversions to and from the narrow kinds (float8, float4, int4, int2), built from core primitives.

No kernel computes with a narrow kind, so every backend gets these conversions for free:

- decoding reads the tensor's bytes (BitCast to uint8) and gathers their values from the
  kind's 256-entry float32 table (``glow_core.narrow.decode_table``);
- encoding a float to float8/float4 rounds to nearest even by counting, with integer
  compares on the float's bits, the rounding thresholds below it (a branchless binary search
  of Gathers from ``glow_core.narrow.rounding_thresholds``), then sets the sign bit and
  the NaN code with Select; FLOAT8E8M0 follows ONNX's exponent-bit algorithm instead;
- encoding to int4/int2 converts to int64 and keeps the kind's low bits (ONNX Cast wraps,
  "discarding higher bits", as onnx.reference and ml_dtypes do).

The result bytes become the narrow kind by a BitCast from uint8, a view costing nothing.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from glow_core.frontends.onnx import build
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.narrow import NarrowFloat, NarrowInt, decode_table, format_of, rounding_thresholds
from glow_core.types import ElemKind

RoundMode = Literal["up", "down", "nearest"]

_BITS_OF = {ElemKind.float32: ElemKind.int32, ElemKind.float64: ElemKind.int64}
"""The signed integer kind of a float kind's width, for reading its bits."""

_INT64_SAFE = float(1 << 62)
"""Floats are clamped into +-2**62 before an int64 conversion: past int64 the conversion is
undefined on hardware, and ONNX leaves out-of-range float-to-integer casts undefined anyway."""


def cast(
    b: Builder,
    x: Node,
    elem: ElemKind,
    *,
    saturate: bool = True,
    round_mode: RoundMode = "up",
    name: str | None = None,
) -> Node:
    """``x`` converted to ``elem`` as ONNX Cast does, where either side may be a narrow kind."""
    if x.type.elem is elem:
        return x
    if x.type.elem.is_narrow:
        x = decode(b, x, ElemKind.float32 if elem.is_narrow else elem, name=None if elem.is_narrow else name)
    if elem.is_narrow:
        return encode(b, x, elem, saturate=saturate, round_mode=round_mode, name=name)
    return build.convert(b, x, elem, name=name)


def decode(b: Builder, x: Node, elem: ElemKind = ElemKind.float32, name: str | None = None) -> Node:
    """The values of narrow ``x`` in wide kind ``elem`` (exact in float32; then one Convert)."""
    table = build.constant(b, decode_table(x.type.elem), f"{x.type.elem.name}_values")
    index = b.Convert(b.BitCast(x, elem=ElemKind.uint8.name), elem=ElemKind.int32.name)
    values = b.Gather(table, index, axis=0, name=name if elem is ElemKind.float32 else None)
    return build.convert(b, values, elem, name=name)


def encode(
    b: Builder,
    x: Node,
    kind: ElemKind,
    *,
    saturate: bool = True,
    round_mode: RoundMode = "up",
    name: str | None = None,
) -> Node:
    """Wide ``x`` (float, integer or bool) in narrow ``kind``: the ONNX Cast rules for it."""
    fmt = format_of(kind)
    if isinstance(fmt, NarrowInt):
        code = _wrapped_int(b, x, fmt)
    elif not fmt.subnormals:
        code = _e8m0_code(b, _float_source(b, x, wide=False), saturate, round_mode)
    else:
        code = _rounded_float(b, _float_source(b, x, wide=True), fmt, saturate)
    return b.BitCast(b.Convert(code, elem=ElemKind.uint8.name), elem=kind.name, name=name)


def _float_source(b: Builder, x: Node, *, wide: bool) -> Node:
    """``x`` as float32, or as float64 when it is float64 and ``wide``: widening float16 and
    bfloat16 is exact, so every value rounds once, from its own precision."""
    if wide and x.type.elem is ElemKind.float64:
        return x
    return build.convert(b, x, ElemKind.float32)


def _splat(b: Builder, value: int | float | bool, like: Node, elem: ElemKind | None = None) -> Node:
    t = like.type if elem is None else like.type.with_elem(elem)
    return b.splat(value, t)


def _rounded_float(b: Builder, x: Node, fmt: NarrowFloat, saturate: bool) -> Node:
    """The int32 code of float ``x`` in ``fmt``: round to nearest even, then sign and NaN."""
    bits_kind = _BITS_OF[x.type.elem]
    bits = b.BitCast(x, elem=bits_kind.name)
    magnitude = b.Bitwise(bits, _splat(b, int(np.iinfo(bits_kind.dtype).max), bits), op="and")
    thresholds = rounding_thresholds(fmt.kind, saturate, x.type.dtype)
    code = _count_below(b, magnitude, thresholds)
    if fmt.signed:
        negative = b.Compare(bits, _splat(b, 0, bits), predicate="lt")
        if fmt.nan == "negative_zero":  # no -0 (its code is NaN), and the overflow NaN is unsigned
            nonzero = b.Compare(_splat(b, 0, code), code, predicate="lt")
            finite = b.Compare(code, _splat(b, fmt.max_code, code), predicate="le")
            negative = b.Bitwise(negative, b.Bitwise(nonzero, finite, op="and"), op="and")
        code = b.Select(negative, b.Add(code, _splat(b, fmt.sign_bit, code)), code)
    infinity = np.asarray(np.inf, x.type.dtype).view(bits_kind.dtype).item()
    is_nan = b.Compare(_splat(b, infinity, magnitude), magnitude, predicate="lt")  # bits past inf's
    return b.Select(is_nan, _splat(b, fmt.nan_code, code), code)


def _count_below(b: Builder, magnitude: Node, thresholds: np.ndarray) -> Node:
    """int32 ``#{k : thresholds[k] < magnitude}`` per element, by a branchless binary search
    over the sorted thresholds, padded to a power of two with the largest integer (which no
    magnitude exceeds, so the count stays below the padded size)."""
    size = 1 << len(thresholds).bit_length()
    largest = np.iinfo(thresholds.dtype).max
    padded = np.concatenate([thresholds, np.full(size - len(thresholds), largest, thresholds.dtype)])
    table = build.constant(b, padded, "rounding_thresholds")
    position: Node | None = None
    step = size // 2
    while step >= 1:
        if position is None:  # the first probe is the same element everywhere
            probe = _splat(b, int(padded[step - 1]), magnitude)
            below = b.Compare(probe, magnitude, predicate="lt")
            position = b.Select(
                below, _splat(b, step, magnitude, ElemKind.int32), _splat(b, 0, magnitude, ElemKind.int32)
            )
        else:
            index = b.Add(position, _splat(b, step - 1, position))
            below = b.Compare(b.Gather(table, index, axis=0), magnitude, predicate="lt")
            position = b.Select(below, b.Add(position, _splat(b, step, position)), position)
        step //= 2
    assert position is not None
    return position


def _e8m0_code(b: Builder, x: Node, saturate: bool, round_mode: RoundMode) -> Node:
    """The int32 FLOAT8E8M0 code of float32 ``x``: its exponent field, rounded by ``round_mode``
    on the mantissa bits exactly as ONNX's reference does (the sign is ignored; NaN and
    infinity give the NaN code 0xFF; without saturation rounding past 2**127 gives NaN)."""
    bits = b.BitCast(x, elem=ElemKind.int32.name)

    def field(mask: int) -> Node:
        return b.Bitwise(bits, _splat(b, mask, bits), op="and")

    def positive(value: Node) -> Node:
        return b.Compare(_splat(b, 0, value), value, predicate="lt")

    exponent = b.Div(field(0x7F800000), _splat(b, 1 << 23, bits))
    if round_mode == "up":
        increment: Node | None = positive(field(0x7FFFFF))
    elif round_mode == "nearest":
        guard = positive(field(0x400000))
        sticky_or_odd = b.Bitwise(positive(field(0x3FFFFF)), positive(exponent), op="or")
        increment = b.Bitwise(guard, sticky_or_odd, op="and")
    elif round_mode == "down":
        increment = None
    else:
        raise ValueError(f"round_mode {round_mode!r} is not one of up, down, nearest")
    code = exponent
    if increment is not None:
        if saturate:  # never round up from the largest exponent into NaN
            largest = b.Compare(exponent, _splat(b, 0xFE, exponent), predicate="eq")
            increment = b.Select(largest, _splat(b, False, increment), increment)
        code = b.Select(increment, b.Add(exponent, _splat(b, 1, exponent)), exponent)
    special = b.Compare(exponent, _splat(b, 0xFF, exponent), predicate="eq")
    return b.Select(special, _splat(b, 0xFF, code), code)


def _wrapped_int(b: Builder, x: Node, fmt: NarrowInt) -> Node:
    """The int64 code of ``x`` in narrow integer ``fmt``: truncated toward zero (floats), then
    its low ``fmt.bits`` bits, which is two's complement wrapping (NaN becomes 0)."""
    if x.type.elem.is_float:
        x = _float_source(b, x, wide=True)
        low, high = _splat(b, -_INT64_SAFE, x), _splat(b, _INT64_SAFE, x)
        clamped = b.Select(b.Compare(x, low, predicate="lt"), low, x)
        clamped = b.Select(b.Compare(high, clamped, predicate="lt"), high, clamped)
        whole = b.Convert(clamped, elem=ElemKind.int64.name)
        is_nan = build.logical_not(b, b.Compare(x, x, predicate="eq"))
        whole = b.Select(is_nan, _splat(b, 0, whole), whole)
    else:
        whole = build.convert(b, x, ElemKind.int64)
    return b.Bitwise(whole, _splat(b, fmt.mask, whole), op="and")
