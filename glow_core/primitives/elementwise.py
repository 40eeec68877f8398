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


def _binary(name: str, doc: str, fn, *, kinds=NUMERIC_KINDS, sample=None, core=True, grad=None):
    """Declare an element-wise binary primitive of two same-typed operands, computed by ``fn``
    (float operands widened to float64 first), differentiated by ``grad`` when given."""

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
    if grad is not None:
        body["grad"] = grad
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


# ---- gradient rules: grad(b, node, out_grad) -> one gradient per operand ---------------
# Operands of element-wise primitives are already broadcast to one shape (the builder
# inserts Broadcast nodes), so these rules are shape-preserving; the reduction over the
# broadcast axes is Broadcast's own rule.


def _negate(b, x):
    return b.Sub(b.splat(0.0, x), x)


def _add_grad(b, node, out_grad):
    return out_grad, out_grad


def _sub_grad(b, node, out_grad):
    return out_grad, _negate(b, out_grad)


def _mul_grad(b, node, out_grad):
    return b.Mul(out_grad, node.rhs), b.Mul(out_grad, node.lhs)


def _div_grad(b, node, out_grad):
    # d(l/r)/dl = 1/r; d(l/r)/dr = -(l/r)/r, read from the result instead of recomputing it.
    return b.Div(out_grad, node.rhs), _negate(b, b.Div(b.Mul(out_grad, node), node.rhs))


def _select_grad(b, out_grad, to_lhs):
    zero = b.splat(0.0, out_grad)
    return b.Select(to_lhs, out_grad, zero), b.Select(to_lhs, zero, out_grad)


def _max_grad(b, node, out_grad):
    # Ties send the gradient to rhs: Relu (Max(x, 0)) then has derivative 0 at 0, as usual.
    return _select_grad(b, out_grad, b.Compare(node.rhs, node.lhs, predicate="lt"))


def _min_grad(b, node, out_grad):
    return _select_grad(b, out_grad, b.Compare(node.lhs, node.rhs, predicate="lt"))


def _pow_grad(b, node, out_grad):
    # d(l**r)/dl = r * l**(r-1) = r * out / l (bases are positive); d/dr = out * log(l).
    scaled = b.Mul(out_grad, node)
    return b.Div(b.Mul(scaled, node.rhs), node.lhs), b.Mul(scaled, b.Log(node.lhs))


Add = _binary("Add", "Element-wise sum of two tensors of one type.", np.add, grad=_add_grad)
Sub = _binary("Sub", "Element-wise difference ``lhs - rhs``.", np.subtract, grad=_sub_grad)
Mul = _binary("Mul", "Element-wise product.", np.multiply, grad=_mul_grad)
Div = _binary(
    "Div",
    "Element-wise quotient ``lhs / rhs`` (integer kinds truncate toward zero, as ONNX).",
    _divide,
    sample=_nonzero_divisors,
    grad=_div_grad,
)
Max = _binary("Max", "Element-wise maximum (Relu and Clip lower to it).", np.maximum, grad=_max_grad)
Min = _binary("Min", "Element-wise minimum.", np.minimum, grad=_min_grad)
Pow = _binary(
    "Pow",
    "Element-wise power ``lhs ** rhs`` (float kinds).",
    np.power,
    kinds=FLOAT_KINDS,
    sample=_positive_bases,
    grad=_pow_grad,
)


def _unary(name: str, doc: str, fn, *, positive: bool = False, core: bool = True, grad=None):
    """Declare a float element-wise unary primitive computed in float64 by ``fn``,
    differentiated by ``grad`` when given."""

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
    if grad is not None:
        body["grad"] = grad
    return primitive(type(name, (), body))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _exp_grad(b, node, out_grad):
    return (b.Mul(out_grad, node),)


def _log_grad(b, node, out_grad):
    return (b.Div(out_grad, node.input),)


def _sqrt_grad(b, node, out_grad):
    return (b.Div(out_grad, b.Mul(node, b.splat(2.0, node))),)


def _tanh_grad(b, node, out_grad):
    return (b.Mul(out_grad, b.Sub(b.splat(1.0, node), b.Mul(node, node))),)


def _erf_grad(b, node, out_grad):
    x = node.input
    slope = b.Mul(b.Exp(_negate(b, b.Mul(x, x))), b.splat(2.0 / math.sqrt(math.pi), x))
    return (b.Mul(out_grad, slope),)


Exp = _unary("Exp", "Element-wise e**x.", np.exp, grad=_exp_grad)
Log = _unary("Log", "Element-wise natural logarithm.", np.log, positive=True, grad=_log_grad)
Sqrt = _unary("Sqrt", "Element-wise square root.", np.sqrt, positive=True, grad=_sqrt_grad)
Tanh = _unary("Tanh", "Element-wise hyperbolic tangent.", np.tanh, grad=_tanh_grad)
Erf = _unary("Erf", "Element-wise Gauss error function (GELU uses it).", _erf, grad=_erf_grad)
