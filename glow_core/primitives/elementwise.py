"""Element-wise primitives: arithmetic and transcendental functions."""

from __future__ import annotations

import math

import numpy as np

from glow_core.primitives.kinds import NUMERIC_KINDS, positive_tensor, wide
from glow_core.spec import In, ex, primitive, random_tensor, same_type
from glow_core.types import Type

# ---- element-wise -----------------------------------------------------------------------

_BINARY_EXAMPLES = (ex("f32[4,5]", "f32[4,5]"), ex("f32[3,1,7]", "f32[3,1,7]"), ex("f32[1]", "f32[1]"))
_UNARY_EXAMPLES = (ex("f32[4,5]"), ex("f32[2,3,17]"), ex("f32[1]"), ex("f32[]"))


@primitive
class Add:
    """Element-wise sum of two tensors of one type."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return wide(lhs) + wide(rhs)


@primitive
class Sub:
    """Element-wise difference ``lhs - rhs``."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return wide(lhs) - wide(rhs)


@primitive
class Mul:
    """Element-wise product."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return wide(lhs) * wide(rhs)


@primitive
class Div:
    """Element-wise quotient ``lhs / rhs`` (integer kinds truncate toward zero, as ONNX)."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def sample(rng, lhs, rhs):
        signed = np.dtype(rhs.dtype).kind != "u"
        sign = np.where(rng.random(rhs.shape) < 0.5, -1, 1) if signed else 1
        return [random_tensor(rng, lhs), (sign * positive_tensor(rng, rhs)).astype(rhs.dtype)]

    def reference(lhs, rhs):
        if lhs.dtype.kind in "iu":
            return np.trunc(lhs / rhs).astype(lhs.dtype)
        return wide(lhs) / wide(rhs)


@primitive
class Max:
    """Element-wise maximum (Relu and Clip lower to it)."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return np.maximum(lhs, rhs)


@primitive
class Min:
    """Element-wise minimum."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = NUMERIC_KINDS
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def reference(lhs, rhs):
        return np.minimum(lhs, rhs)


@primitive
class Pow:
    """Element-wise power ``lhs ** rhs`` (float kinds)."""

    lhs = In()
    rhs = In()
    elementwise = True
    inplace = ("lhs", "rhs")
    examples = _BINARY_EXAMPLES
    type = same_type("lhs", "rhs")

    def sample(rng, lhs, rhs):
        return [positive_tensor(rng, lhs), rng.uniform(-2, 2, rhs.shape).astype(rhs.dtype)]

    def reference(lhs, rhs):
        return np.power(wide(lhs), wide(rhs))


def _unary(name: str, doc: str, fn, *, positive: bool = False):
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
