"""Narrow element kinds (float8, float4, int4, int2): their bit layouts, and the load-time
tables that conversions to and from them are lowered to.

glow holds a narrow tensor one element per byte, as ml_dtypes stores it (an int4 -3 is the
byte 0x0D). No kernel computes with these kinds: a conversion becomes a BitCast to uint8
plus core primitives (``glow_core.frontends.onnx.narrow_cast``), reading the tables built
here. Every fact about a narrow kind (width, exponent bias, specials, range) is in
``FORMATS`` and nowhere else; the value tables are *derived* from those facts rather than
taken from ml_dtypes, so the tests can hold them against ml_dtypes as an independent oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from glow_core.types import ElemKind

NanStyle = Literal["ieee", "all_ones", "negative_zero", "none"]
"""Where a float format keeps NaN: ``ieee`` (all-ones exponent, with infinities: E5M2),
``all_ones`` (only the all-ones magnitude: E4M3FN, E8M0), ``negative_zero`` (the code of
-0, 0x80: the FNUZ kinds), ``none`` (FLOAT4E2M1 has no NaN)."""


@dataclass(frozen=True, slots=True)
class NarrowFloat:
    """One narrow float layout: sign, exponent and mantissa widths, bias, specials."""

    kind: ElemKind
    exponent_bits: int
    mantissa_bits: int
    bias: int
    nan: NanStyle
    signed: bool = True  # E8M0 has no sign bit
    subnormals: bool = True  # E8M0's exponent field 0 is 2**-127: it has no zero
    saturates_always: bool = False  # ONNX's `saturate` applies to float8 only; float4 always clamps

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def sign_bit(self) -> int:
        """The code bit holding the sign (0 for unsigned formats)."""
        return 1 << (self.bits - 1) if self.signed else 0

    def magnitude(self, code: int) -> float:
        """The value of a sign-less code by the layout alone (specials not applied), so a
        code past the largest finite one gives the value the format would have there."""
        exponent, fraction = code >> self.mantissa_bits, code & ((1 << self.mantissa_bits) - 1)
        scale = 1 << self.mantissa_bits
        if exponent == 0 and self.subnormals:
            return fraction / scale * 2.0 ** (1 - self.bias)
        return (1 + fraction / scale) * 2.0 ** (exponent - self.bias)

    def value(self, code: int) -> float:
        """The value of ``code`` (0 <= code < 2**bits), specials included."""
        negative = bool(code & self.sign_bit)
        magnitude_code = code & ~self.sign_bit
        all_ones = (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        if self.nan == "all_ones" and magnitude_code == all_ones:
            return float("nan")
        if self.nan == "negative_zero" and code == self.sign_bit:
            return float("nan")
        if self.nan == "ieee" and magnitude_code >> self.mantissa_bits == (1 << self.exponent_bits) - 1:
            inf_or_nan = (
                float("inf") if magnitude_code & ((1 << self.mantissa_bits) - 1) == 0 else float("nan")
            )
            return -inf_or_nan if negative else inf_or_nan
        value = self.magnitude(magnitude_code)
        return -value if negative else value

    @property
    def max_code(self) -> int:
        """The positive code of the largest finite value."""
        return max(c for c in range(1 << (self.bits - int(self.signed))) if np.isfinite(self.value(c)))

    @property
    def nan_code(self) -> int:
        """The code a NaN converts to; float4 (no NaN) makes it +0."""
        if self.nan == "negative_zero":
            return self.sign_bit
        if self.nan == "none":
            return 0
        magnitude = (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        return magnitude if self.nan == "all_ones" else magnitude - 1  # E5M2: a quiet NaN, 0x7E

    @property
    def overflow_code(self) -> int | None:
        """The code a value rounding past the largest finite one takes without saturation:
        infinity (E5M2) or NaN (E4M3FN, the FNUZ kinds); None where the format always clamps."""
        return None if self.saturates_always else self.max_code + 1


@dataclass(frozen=True, slots=True)
class NarrowInt:
    """One narrow integer layout: two's complement (signed) or plain, in the low ``bits``."""

    kind: ElemKind
    bits: int
    signed: bool

    @property
    def low(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def high(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def mask(self) -> int:
        """Keeping these bits of an integer wraps it into the kind (Cast's "discard higher bits")."""
        return (1 << self.bits) - 1

    def value(self, code: int) -> int:
        return code - (1 << self.bits) if self.signed and code > self.high else code


NarrowFormat = NarrowFloat | NarrowInt

FORMATS: dict[ElemKind, NarrowFormat] = {
    f.kind: f
    for f in (
        NarrowFloat(ElemKind.float8_e4m3fn, 4, 3, 7, "all_ones"),
        NarrowFloat(ElemKind.float8_e4m3fnuz, 4, 3, 8, "negative_zero"),
        NarrowFloat(ElemKind.float8_e5m2, 5, 2, 15, "ieee"),
        NarrowFloat(ElemKind.float8_e5m2fnuz, 5, 2, 16, "negative_zero"),
        NarrowFloat(ElemKind.float8_e8m0fnu, 8, 0, 127, "all_ones", signed=False, subnormals=False),
        NarrowFloat(ElemKind.float4_e2m1fn, 2, 1, 1, "none", saturates_always=True),
        NarrowInt(ElemKind.int4, 4, signed=True),
        NarrowInt(ElemKind.uint4, 4, signed=False),
        NarrowInt(ElemKind.int2, 2, signed=True),
        NarrowInt(ElemKind.uint2, 2, signed=False),
    )
}
"""The one table of narrow-kind facts; its keys are exactly ``glow_core.types.NARROW_KINDS``."""


def format_of(kind: ElemKind) -> NarrowFormat:
    """The layout of narrow ``kind``; KeyError for a kind that is not narrow."""
    return FORMATS[kind]


def decode_table(kind: ElemKind) -> np.ndarray:
    """float32[256]: the value of every byte glow may hold for ``kind`` (exact: every narrow
    value is a float32). Bits above the kind's width are ignored, so any byte decodes."""
    fmt = FORMATS[kind]
    mask = (1 << fmt.bits) - 1
    return np.array([fmt.value(byte & mask) for byte in range(256)], dtype=np.float32)


def finite_codes(kind: ElemKind) -> np.ndarray:
    """uint8 codes of every finite value of ``kind`` (for sampling test data without NaN)."""
    table = decode_table(kind)[: 1 << FORMATS[kind].bits]
    return np.flatnonzero(np.isfinite(table)).astype(np.uint8)


def rounding_thresholds(kind: ElemKind, saturate: bool, source: np.dtype) -> np.ndarray:
    """Sorted bit patterns ``T`` (as the signed integers of ``source``'s width) such that a
    non-negative ``x`` of float dtype ``source`` rounds to positive code ``#{k : T[k] < bits(x)}``.

    The codes 0, 1, ..., max_code hold increasing values v_0 < v_1 < ..., so rounding to
    nearest is counting the midpoints below x. A tie goes to the even code: the midpoint of
    v_k and v_k+1 sends x up when x > m_k, or when x == m_k and k + 1 is even, i.e. x's bits
    exceed bits(m_k) - 1. Non-negative floats order like their bits, so the count needs only
    integer compares (and no backend's denormal flushing can change it). Without saturation
    one more value, the overflow code's, takes what rounds past the largest finite value.
    """
    fmt = FORMATS[kind]
    if not isinstance(fmt, NarrowFloat) or not fmt.subnormals:
        raise ValueError(f"{kind.name} is not rounded by thresholds")
    top = fmt.max_code if saturate or fmt.overflow_code is None else fmt.max_code + 1
    values = [fmt.magnitude(code) for code in range(top + 1)]
    source = np.dtype(source)
    int_dtype = np.dtype(f"i{source.itemsize}")
    thresholds = []
    for k in range(top):
        midpoint = np.asarray((values[k] + values[k + 1]) / 2, dtype=source)  # exact: few mantissa bits
        bits = int(midpoint.view(int_dtype))
        thresholds.append(bits - 1 if k % 2 == 1 else bits)
    return np.array(thresholds, dtype=int_dtype)
