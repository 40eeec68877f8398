"""exp, tanh and erf as branch-free LLVM IR for float32, so loops using them vectorize.

``llvm.exp`` has no vector lowering on x86 without a vector math library: LLVM scalarizes it
into one ``expf`` call per lane. These are polynomial/rational forms built from fma, select
and integer bit tricks only; each works on a scalar ``float`` or on a ``<N x float>``.

The polynomial coefficients are least-squares fits (relative error weighted) computed once
at import from float64 references; the tests check every function against float64 to
< 1e-6 relative over its whole range.

float64 (``double`` scalars or vectors) is not approximated: the polynomials are fitted to
float32's precision, and a float64 model expects double's. Doubles go to libm through the
LLVM intrinsics (``llvm.exp``, ``llvm.tanh``) or a direct call (``erf``, which has no
intrinsic): scalar calls, accurate to about an ulp, and acceptable because float64 math is
rare in models.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from llvmlite import ir

from glow_cpu.kinds import float_suffix
from glow_cpu.loops import F32, F64, I32

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125  # ln 2 split so n * _LN2_HI is exact for |n| <= 256
_LN2_LO = 1.4286068203094173e-06
_EXP_MAX = 88.72283
_EXP_MIN = -87.33654
_TANH_SMALL = 0.625  # below: odd polynomial; above: 1 - 2 / (exp(2|x|) + 1)
_TANH_CLAMP = 9.0  # tanh(9) rounds to 1.0f
_ERF_SMALL = 1.0  # below: x * P(x^2); above: a polynomial in x itself
_ERF_CLAMP = 3.92  # erfc(3.92) < half an ulp of 1.0f
_ERF_MID = (_ERF_SMALL + _ERF_CLAMP) / 2  # the tail's polynomial is in t = (x - mid) / half
_ERF_HALF = (_ERF_CLAMP - _ERF_SMALL) / 2


def _fit(xs: np.ndarray, ys: np.ndarray, degree: int) -> list[float]:
    """Coefficients (low to high) of the polynomial fitting ys(xs), relative error weighted."""
    basis = np.stack([xs**i for i in range(degree)], axis=1)
    weight = 1.0 / np.abs(ys)
    coeffs, *_ = np.linalg.lstsq(basis * weight[:, None], ys * weight, rcond=None)
    return [float(c) for c in coeffs]


def _nodes(lo: float, hi: float, n: int = 2000) -> np.ndarray:
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


@functools.cache
def coefficients() -> dict[str, list[float]]:
    """The fitted polynomials: exp on [-ln2/2, ln2/2], tanh and erf near 0, erf's tail on
    [1, 3.92] in the scaled variable t of [-1, 1] (degree 12: 9e-8 of absolute error in
    float32, 13 coefficients summing to 1.2 in magnitude, so Horner's rule adds no more)."""
    r = _nodes(-0.35, 0.35)
    small = _nodes(1e-4, _TANH_SMALL)
    near = _nodes(1e-4, _ERF_SMALL)
    tail = _nodes(_ERF_SMALL, _ERF_CLAMP)
    erf = np.vectorize(math.erf)
    return {
        "exp": _fit(r, np.exp(r), 7),
        "tanh": _fit(small * small, (np.tanh(small) - small) / small**3, 5),
        "erf": _fit(near * near, erf(near) / near, 7),
        "erf_tail": _fit((tail - _ERF_MID) / _ERF_HALF, erf(tail), 13),
    }


def _const(like: ir.Value, value: float | int) -> ir.Constant:
    """A constant of ``like``'s type (a splat when it is a vector)."""
    ty = like.type
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def _int_type_of(like: ir.Value) -> ir.Type:
    if isinstance(like.type, ir.VectorType):
        return ir.VectorType(I32, like.type.count)
    return I32


def is_double(x: ir.Value) -> bool:
    """Whether ``x`` is a double or a vector of doubles (float64 computes in double)."""
    ty = x.type
    return isinstance(ty.element if isinstance(ty, ir.VectorType) else ty, ir.DoubleType)


def _call(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    ty = args[0].type
    full = f"{name}.{float_suffix(ty)}"
    module = b.module
    fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(ty, [ty] * len(args)), full)
    return b.call(fn, list(args))


def fabs(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _call(b, "llvm.fabs", x)


def clamp(b: ir.IRBuilder, x: ir.Value, lo: float, hi: float) -> ir.Value:
    """min(max(x, lo), hi) with llvm.minnum/maxnum (NaN in gives a bound out; callers re-select)."""
    return _call(b, "llvm.minnum", _call(b, "llvm.maxnum", x, _const(x, lo)), _const(x, hi))


def horner(b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """sum(c[i] * x**i) by Horner's rule with fused multiply-adds."""
    acc = _const(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _call(b, "llvm.fma", acc, x, _const(x, c))
    return acc


def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e**x: x = n ln2 + r, e**r by polynomial, 2**n built in the exponent bits (two halves,
    so every factor stays a normal float). Overflow gives inf, underflow 0, NaN stays NaN.
    Doubles call libm's exp."""
    if is_double(x):
        return _call(b, "llvm.exp", x)
    xc = clamp(b, x, _EXP_MIN, _EXP_MAX)
    n = _call(b, "llvm.rint", b.fmul(xc, _const(x, _LOG2E)))
    r = _call(b, "llvm.fma", n, _const(x, -_LN2_HI), xc)
    r = _call(b, "llvm.fma", n, _const(x, -_LN2_LO), r)
    p = horner(b, r, coefficients()["exp"])
    ni = b.fptosi(n, _int_type_of(x))
    half = b.ashr(ni, _const_int(x, 1))
    rest = b.sub(ni, half)
    p = b.fmul(p, _pow2(b, half, x))
    p = b.fmul(p, _pow2(b, rest, x))
    p = b.select(b.fcmp_ordered(">", x, _const(x, _EXP_MAX)), _const(x, math.inf), p)
    p = b.select(b.fcmp_ordered("<", x, _const(x, _EXP_MIN)), _const(x, 0.0), p)
    return b.select(b.fcmp_unordered("uno", x, x), x, p)


def _const_int(like: ir.Value, value: int) -> ir.Constant:
    ty = _int_type_of(like)
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(I32, value)] * ty.count)
    return ir.Constant(ty, value)


def _pow2(b: ir.IRBuilder, n: ir.Value, like: ir.Value) -> ir.Value:
    bits = b.shl(b.add(n, _const_int(like, 127)), _const_int(like, 23))
    return b.bitcast(bits, like.type)


def tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """tanh: an odd polynomial near 0, 1 - 2/(e**2|x| + 1) elsewhere, the sign of x put back
    (-0.0 stays -0.0).
    Doubles call libm's tanh."""
    if is_double(x):
        return _call(b, "llvm.tanh", x)
    ax = fabs(b, x)
    s = b.fmul(x, x)
    small = _call(b, "llvm.fma", b.fmul(x, s), horner(b, s, coefficients()["tanh"]), x)
    big_x = clamp(b, ax, 0.0, _TANH_CLAMP)
    e = exp(b, b.fadd(big_x, big_x))
    big = b.fsub(_const(x, 1.0), b.fdiv(_const(x, 2.0), b.fadd(e, _const(x, 1.0))))
    result = b.select(b.fcmp_ordered("<", ax, _const(x, _TANH_SMALL)), small, big)
    # tanh has the sign of x, -0.0 included: the polynomial's fma(-0.0 * s, p, -0.0) with a
    # negative p is +0.0, so the sign is put back on both branches.
    result = _call(b, "llvm.copysign", result, x)
    return b.select(b.fcmp_unordered("uno", x, x), x, result)


def erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """erf: x P(x^2) near 0, a polynomial in |x| on [1, 3.92] beyond (clamped there, where
    erf rounds to 1.0f), signed. Doubles call libm's erf (no LLVM intrinsic exists), lane
    by lane for a vector.

    Both branches are computed for every lane (a vector's lanes may need either), so the
    operation count is the cost. The tail needs no relative accuracy (erf is 0.84-1 there):
    its absolute error (9e-8, about an ulp of 1.0) is what ``1 - e**(-x^2) Q(1/x)`` had
    after rounding, without that form's division and exponential (42 LLVM operations per
    erf, one a division, became 28; GELU in a dense layer's epilogue is mostly erf). The choice
    ``|x| >= 1 ? tail : x P(x^2)`` is ordered, so a NaN takes the polynomial, which keeps
    it, and needs no select of its own; the tail is capped at 1."""
    if is_double(x):
        return _libm_double(b, "erf", x)
    ax = fabs(b, x)
    small = b.fmul(x, horner(b, b.fmul(x, x), coefficients()["erf"]))
    tail_x = clamp(b, ax, _ERF_SMALL, _ERF_CLAMP)
    t = _call(b, "llvm.fma", tail_x, _const(x, 1.0 / _ERF_HALF), _const(x, -_ERF_MID / _ERF_HALF))
    tail = _call(b, "llvm.minnum", horner(b, t, coefficients()["erf_tail"]), _const(x, 1.0))
    big = _call(b, "llvm.copysign", tail, x)
    return b.select(b.fcmp_ordered(">=", ax, _const(x, _ERF_SMALL)), big, small)


_SQRT_HALF = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


def gelu(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """GELU, exact: 0.5 x (1 + erf(x / sqrt 2)), one expression so that it runs as a GEMM
    epilogue (the pattern of five primitives reads x twice, which a fused chain cannot)."""
    half_x = b.fmul(x, _const(x, 0.5))
    return _call(b, "llvm.fma", half_x, erf(b, b.fmul(x, _const(x, _SQRT_HALF))), half_x)


def gelu_tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """GELU, tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x**3)))."""
    inner = b.fmul(x, _call(b, "llvm.fma", b.fmul(x, x), _const(x, 0.044715), _const(x, 1.0)))
    half_x = b.fmul(x, _const(x, 0.5))
    gate = tanh(b, b.fmul(inner, _const(x, _SQRT_2_OVER_PI)))
    return _call(b, "llvm.fma", half_x, gate, half_x)


def _libm_double(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """``name(x)`` of the C math library on a double, or on each lane of a double vector."""
    module = b.module
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(F64, [F64]), name)
    if not isinstance(x.type, ir.VectorType):
        return b.call(fn, [x])
    result = ir.Constant(x.type, ir.Undefined)
    for lane in range(x.type.count):
        index = ir.Constant(I32, lane)
        result = b.insert_element(result, b.call(fn, [b.extract_element(x, index)]), index)
    return result


__all__ = ["F32", "erf", "exp", "gelu", "gelu_tanh", "is_double", "tanh"]
