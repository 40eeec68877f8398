"""Element-wise primitives: arithmetic and transcendental functions."""

from __future__ import annotations

import math

import numpy as np

from glow_core.primitives.kinds import NUMERIC_KINDS, positive_tensor, wide
from glow_core.spec import In, ex, primitive, random_tensor, same_type
from glow_core.types import FLOAT_KINDS, Type

# ---- element-wise -----------------------------------------------------------------------

_BINARY_EXAMPLES = (ex("f32[4,5]", "f32[4,5]"), ex("f32[3,1,7]", "f32[3,1,7]"), ex("f32[1]", "f32[1]"))
_UNARY_EXAMPLES = (ex("f32[4,5]"), ex("f32[2,3,17]"), ex("f32[1]"), ex("f32[]"))


def _binary(name: str, doc: str, fn, *, kinds=NUMERIC_KINDS, sample=None, core=True):
    """Declare an element-wise binary primitive of two same-typed operands, computed by ``fn``
    (float operands widened to float64 first)."""

    def reference(lhs, rhs):
        return fn(wide(lhs), wide(rhs))

    body = {
        "__doc__": doc,
        "lhs": In(),
        "rhs": In(),
        "elementwise": True,
        "inplace": ("lhs", "rhs"),
        "kinds": kinds,
        "core": core,
        "examples": _BINARY_EXAMPLES,
        "type": same_type("lhs", "rhs"),
        "reference": reference,
    }
    if sample is not None:
        body["sample"] = sample
    return primitive(type(name, (), body))


def _divide(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    if lhs.dtype.kind in "iu":
        # Integer kinds truncate toward zero, as ONNX, computed in integers: a quotient taken
        # through float64 is wrong past 2**53 (int64 and uint64 operands). The minimum divided
        # by -1 overflows, which numpy reports (a trap under np.errstate(over="raise")).
        floor = np.floor_divide(lhs, rhs)
        inexact = np.fmod(lhs, rhs) != 0
        return (floor + (inexact & ((lhs < 0) != (rhs < 0)))).astype(lhs.dtype)
    return lhs / rhs


def _nonzero_divisors(rng, lhs, rhs):
    signed = np.dtype(rhs.dtype).kind != "u"
    sign = np.where(rng.random(rhs.shape) < 0.5, -1, 1) if signed else 1
    return [random_tensor(rng, lhs), (sign * positive_tensor(rng, rhs)).astype(rhs.dtype)]


def _positive_bases(rng, lhs, rhs):
    return [positive_tensor(rng, lhs), rng.uniform(-2, 2, rhs.shape).astype(rhs.dtype)]


Add = _binary("Add", "Element-wise sum of two tensors of one type.", np.add)
Sub = _binary("Sub", "Element-wise difference ``lhs - rhs``.", np.subtract)
Mul = _binary("Mul", "Element-wise product.", np.multiply)
Div = _binary(
    "Div",
    "Element-wise quotient ``lhs / rhs`` (integer kinds truncate toward zero, as ONNX).",
    _divide,
    sample=_nonzero_divisors,
)
Max = _binary("Max", "Element-wise maximum (Relu and Clip lower to it).", np.maximum)
Min = _binary("Min", "Element-wise minimum.", np.minimum)
Pow = _binary(
    "Pow",
    "Element-wise power ``lhs ** rhs`` (float kinds).",
    np.power,
    kinds=FLOAT_KINDS,
    sample=_positive_bases,
)


def _unary(name: str, doc: str, fn, *, positive: bool = False, core: bool = True):
    """Declare a float element-wise unary primitive computed in float64 by ``fn``."""

    def type_rule(input: Type) -> Type:
        return input

    def reference(input):
        return fn(wide(input))

    body = {
        "__doc__": doc,
        "input": In(),
        "elementwise": True,
        "inplace": ("input",),
        "core": core,
        "examples": _UNARY_EXAMPLES,
        "type": type_rule,
        "reference": reference,
    }
    if positive:
        body["sample"] = lambda rng, input: [positive_tensor(rng, input)]
    return primitive(type(name, (), body))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


Exp = _unary("Exp", "Element-wise e**x.", np.exp)
Log = _unary("Log", "Element-wise natural logarithm.", np.log, positive=True)
Sqrt = _unary("Sqrt", "Element-wise square root.", np.sqrt, positive=True)
Tanh = _unary("Tanh", "Element-wise hyperbolic tangent.", np.tanh)
Erf = _unary("Erf", "Element-wise Gauss error function (GELU uses it).", _erf)
