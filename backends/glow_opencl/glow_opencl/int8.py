"""int8 layers (QuantizedConv, QuantizedFullyConnected) with int32 accumulation, bit-exact.

The meaning is the reference's (``glow_core.graph.nodes.quantized``)::

    acc = sum((input - input_offset) * filter)                 int32 here
    out = clip(round_half_even(fl64((acc + bias) * multiplier)) + output_offset, low, high)

One work-item computes one output element: an int32 sum of plain int multiply-adds (``dot``
on char4 is not core OpenCL C 1.2), padding taps skipped (a padded input equals the zero
point, which the centering turns into 0). ``keeps`` admits a layer only when no sum can
leave int32: ``depth * 255 * 128 < 2**31`` (|input - offset| <= 255, |w| <= 128).

Requantization has two exact forms, picked by the device:

- **cl_khr_fp64**: the reference's own float64 arithmetic, ``rint`` being round half to even
  in the default rounding mode. ``acc + bias`` (|.| < 2**32) is exact in double, so the one
  rounding is the product's, as in the reference.
- **no cl_khr_fp64**: each multiplier is split at compile time into ``mant * 2**exp`` with
  ``mant`` a 53-bit integer (``np.frexp``: exact). The kernel forms the exact product
  ``(acc + bias) * mant`` in 128 bits (``mul_hi`` on ulong), rounds it to 53 significant
  bits half to even (what the float64 multiply does, the result being normal or far below
  0.5), then to an integer half to even at the binary point ``exp``: the two roundings of
  the reference, done on integers. Results past +-4096 are saturated early: any output
  offset (|.| <= 255) and clip bound (within [-128, 255]) leave them at the bound.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import UnsupportedOpError
from glow_core.graph.nodes.quantized import QUANTIZED_KINDS
from glow_core.ir.instructions import Instr, Value
from glow_core.types import ElemKind, Type
from glow_opencl.emit import emits
from glow_opencl.runtime import Target
from glow_opencl.source import DerivedConstant, Kernel, Param, constant_value, ctype, linear_kernel

KEPT = ("QuantizedConv", "QuantizedFullyConnected")
MULTIPLIER = 3
"""The operand index of the per-channel float64 multiplier (read on the host without fp64)."""
SATURATE = 4096
"""|result| past which the rounded value is saturated (any offset and bound keep it at the bound)."""


def fits_int32(depth: int) -> bool:
    """Whether a sum of ``depth`` products (input - zero point) * weight cannot leave int32."""
    return depth * 255 * 128 < 2**31


def keeps(kind: str, operands: list[Type], constant: list[bool]) -> bool:
    """Whether the int8 kernels run this layer: constant weights, bias and multiplier (the
    multiplier is split on the host where the device lacks double), sums within int32."""
    if kind not in KEPT or not all(constant[1:]):
        return False
    w = operands[1]
    depth = int(np.prod(w.shape[1:])) if kind == "QuantizedConv" else w.shape[0]
    return fits_int32(depth)


def split_multiplier(multiplier: np.ndarray) -> np.ndarray:
    """float64 [C] -> int64 [2, C]: mantissas (|m| < 2**53) then exponents, ``m = mant * 2**exp``
    exactly (frexp's fraction has 53 bits, so scaling it by 2**53 is an integer)."""
    m = np.asarray(multiplier, np.float64)
    if not np.all(np.isfinite(m)):
        raise UnsupportedOpError("opencl: a requantization multiplier is not finite")
    fraction, exponent = np.frexp(m)
    mantissa = np.ldexp(fraction, 53).astype(np.int64)
    return np.stack([mantissa, exponent.astype(np.int64) - 53])


_EXACT_HELPER = f"""#ifndef GLOW_Q8_ROUND
#define GLOW_Q8_ROUND
long glow_q8_round(const long a, const long mant, const int exp)
{{
    // round_half_even(fl64(a * mant * 2^exp)) on integers, saturated to +-{SATURATE}
    if (a == 0 || mant == 0) return 0;
    const int negative = (a < 0) != (mant < 0);
    const ulong ua = (ulong)(a < 0 ? -a : a);          // < 2^33
    const ulong um = (ulong)(mant < 0 ? -mant : mant); // < 2^53
    const ulong lo = ua * um;
    const ulong hi = mul_hi(ua, um);
    const int bits = hi ? 128 - (int)clz(hi) : 64 - (int)clz(lo);
    ulong q = lo;
    int e = exp;
    if (bits > 53) {{                                  // the float64 product's rounding
        const int s = bits - 53;                        // 1..33
        q = (lo >> s) | (hi << (64 - s));
        const ulong rest = lo & ((1UL << s) - 1UL);
        const ulong mid = 1UL << (s - 1);
        if (rest > mid || (rest == mid && (q & 1UL))) q += 1UL;
        e += s;
    }}
    ulong r;                                            // q * 2^e, rounded to an integer
    if (e >= 0) {{
        r = (e > 12 || (q >> (12 - e)) != 0UL) ? {SATURATE}UL : q << e;
    }} else if (e < -54) {{
        r = 0UL;                                        // q <= 2^53: below one half
    }} else {{
        const int t = -e;
        r = q >> t;
        const ulong rest = q & ((1UL << t) - 1UL);
        const ulong mid = 1UL << (t - 1);
        if (rest > mid || (rest == mid && (r & 1UL))) r += 1UL;
        r = min(r, (ulong){SATURATE});
    }}
    return negative ? -(long)r : (long)r;
}}
#endif
"""


class _Requantize:
    """The requantization of one layer: the extra parameter it reads and its C statement."""

    def __init__(self, instr: Instr, target: Target):
        self.attrs = instr.attrs
        multiplier = instr.sources[MULTIPLIER]
        self.exact = not target.fp64
        if self.exact:
            value = constant_value(multiplier)
            if value is None:
                raise UnsupportedOpError(
                    f"opencl on {target.name!r}: {instr.kind} {instr.name!r} needs a constant multiplier "
                    "(the device lacks cl_khr_fp64, so it is split into integers at compile time)"
                )
            split = split_multiplier(value)
            root = multiplier.root
            self.param = Param("m", ElemKind.int64)
            self.value: Value = DerivedConstant(
                f"{root.name}/exact", Type(split.shape, ElemKind.int64), split
            )
            self.helpers = [_EXACT_HELPER]
        else:
            self.param, self.value, self.helpers = Param("m", ElemKind.float64), multiplier, []

    def lines(self, elem: ElemKind, channel: str, channels: int) -> list[str]:
        """Statements storing ``acc`` (int) + bias of ``channel``, requantized, to ``d[i]``."""
        a = self.attrs
        offset, low, high = a["output_offset"], a["low"], a["high"]
        if self.exact:
            rounded = (
                f"glow_q8_round((long)acc + bias[{channel}], m[{channel}], (int)m[{channels} + {channel}])"
            )
            return [
                f"const long r = {rounded} + {offset}L;",
                f"d[i] = ({ctype(elem)})clamp(r, {low}L, {high}L);",
            ]
        product = f"(double)((long)acc + bias[{channel}]) * m[{channel}]"
        return [
            f"const double r = rint({product}) + {float(offset)!r};",
            f"d[i] = ({ctype(elem)})(int)fmin(fmax(r, {float(low)!r}), {float(high)!r});",
        ]


def _params(instr: Instr, req: _Requantize) -> tuple[list[Param], list[Value]]:
    d, x, w, bias, _ = instr.dest, *instr.sources
    params = [
        Param("d", d.type.elem, writes=True),
        Param("x", x.type.elem),
        Param("w", ElemKind.int8),
        Param("bias", ElemKind.int32),
        req.param,
    ]
    return params, [d, x, w, bias, req.value]


@emits("QuantizedConv", kinds=QUANTIZED_KINDS, host_operands=frozenset({MULTIPLIER}))
def emit_quantized_conv(instr: Instr, target: Target) -> list[Kernel]:
    """NCHW, any group, stride, pad and dilation: the output element ``i`` sums its window
    over its group's input channels, taps outside the image skipped."""
    a = instr.attrs
    (n, cout, oh, ow) = instr.dest.type.shape
    (_, cin, h, w) = instr.sources[0].type.shape
    (_, cin_g, kh, kw) = instr.sources[1].type.shape
    cout_g = cout // a["group"]
    (sh, sw), (dh, dw), (pt, pl) = a["strides"], a["dilations"], a["pads"][:2]
    req = _Requantize(instr, target)
    params, values = _params(instr, req)
    offset = a["input_offset"]
    body = [
        f"const int ox = i % {ow}; const int oy = (i / {ow}) % {oh};",
        f"const int co = (i / {oh * ow}) % {cout}; const int image = i / {cout * oh * ow};",
        f"__global const {ctype(instr.sources[0].type.elem)}* p = "
        f"x + (image * {cin} + (co / {cout_g}) * {cin_g}) * {h * w};",
        f"__global const char* f = w + co * {cin_g * kh * kw};",
        f"const int y0 = oy * {sh} - {pt}; const int x0 = ox * {sw} - {pl};",
        "int acc = 0;",
        f"for (int c = 0; c < {cin_g}; ++c) {{",
        f"    for (int ky = 0; ky < {kh}; ++ky) {{",
        f"        const int y = y0 + ky * {dh};",
        f"        if (y < 0 || y >= {h}) continue;",
        f"        for (int kx = 0; kx < {kw}; ++kx) {{",
        f"            const int xx = x0 + kx * {dw};",
        f"            if (xx < 0 || xx >= {w}) continue;",
        f"            acc += ((int)p[y * {w} + xx] - ({offset})) * (int)f[ky * {kw} + kx];",
        "        }",
        "    }",
        f"    p += {h * w}; f += {kh * kw};",
        "}",
        *req.lines(instr.dest.type.elem, "co", cout),
    ]
    kernel = linear_kernel("qconv", params, values, n * cout * oh * ow, body)
    kernel.helpers = req.helpers
    return [kernel]


@emits("QuantizedFullyConnected", kinds=QUANTIZED_KINDS, host_operands=frozenset({MULTIPLIER}))
def emit_quantized_fully_connected(instr: Instr, target: Target) -> list[Kernel]:
    """input [n, k] @ weights [k, m]: output element ``i`` is one row times one column."""
    (n, m) = instr.dest.type.shape
    k = instr.sources[0].type.shape[1]
    req = _Requantize(instr, target)
    params, values = _params(instr, req)
    offset = instr.attrs["input_offset"]
    body = [
        f"const int col = i % {m}; const int row = i / {m};",
        f"__global const {ctype(instr.sources[0].type.elem)}* p = x + row * {k};",
        "int acc = 0;",
        f"for (int kk = 0; kk < {k}; ++kk) acc += ((int)p[kk] - ({offset})) * (int)w[kk * {m} + col];",
        *req.lines(instr.dest.type.elem, "col", m),
    ]
    kernel = linear_kernel("qfc", params, values, n * m, body)
    kernel.helpers = req.helpers
    return [kernel]
