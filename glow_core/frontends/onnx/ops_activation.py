"""Importers for activations and element-wise math functions beyond the core primitives.

Each is a short formula over Exp, Log, Tanh, Erf, Floor, Sin, Cos, Atan, Max/Min and
Select, written so it stays finite where the textbook form overflows (softplus for large x).
"""

from __future__ import annotations

import math

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.activation import GELU_APPROXIMATIONS, softplus
from glow_core.types import ElemKind


def _positive_part(b: Builder, x: Node) -> Node:
    return b.Max(x, b.splat(0.0, x))


def _negative_part(b: Builder, x: Node) -> Node:
    return b.Min(x, b.splat(0.0, x))


def _scaled(b: Builder, x: Node, factor: float) -> Node:
    return x if factor == 1.0 else b.Mul(x, b.splat(factor, x))


def _expm1_negative(b: Builder, x: Node, alpha: float) -> Node:
    """alpha * (exp(min(x, 0)) - 1): the negative branch of the ELU family, 0 for x >= 0."""
    return _scaled(b, b.Sub(b.Exp(_negative_part(b, x)), b.splat(1.0, x)), alpha)


def _positive_else(b: Builder, x: Node, negative: Node, name: str | None = None) -> Node:
    """x where x > 0, else ``negative``: ONNX's piecewise definition, exact on the positive
    side whatever alpha is (a sum with alpha * 0 would turn every element NaN for a NaN or
    infinite alpha)."""
    return b.Select(b.Compare(b.splat(0.0, x), x, predicate="lt"), x, negative, name=name)


@importer("Elu", "Selu", "Celu")
def _elu_family(ctx: NodeContext) -> Node:
    """x > 0 ? x : alpha (exp(x) - 1); Selu scales by gamma, Celu is max(x, 0) + min(0, alpha
    (exp(x / alpha) - 1)) as ONNX writes it."""
    x, b = ctx.node(0), ctx.b
    if ctx.op_type == "Elu":
        negative = _expm1_negative(b, x, float(ctx.attr("alpha", 1.0)))
        return _positive_else(b, x, negative, name=ctx.name)
    if ctx.op_type == "Celu":  # exactly as written: the min(0, .) matters for a negative alpha
        alpha = float(ctx.attr("alpha", 1.0))
        if alpha == 0.0:
            raise ctx.invalid("attribute 'alpha' is 0, but Celu divides x by alpha")
        if alpha > 0.0:  # min(0, alpha (exp(x / alpha) - 1)) is 0 exactly where x >= 0
            negative = _expm1_negative(b, _scaled(b, x, 1.0 / alpha), alpha)
        else:  # a negative (or NaN) alpha: the min as ONNX writes it, on every element
            scaled = _scaled(b, b.Sub(b.Exp(_scaled(b, x, 1.0 / alpha)), b.splat(1.0, x)), alpha)
            negative = b.min(b.splat(0.0, x), scaled)
        return b.Add(_positive_part(b, x), negative, name=ctx.name)
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    inner = _positive_else(b, x, _expm1_negative(b, x, alpha))
    return b.Mul(inner, b.splat(gamma, x), name=ctx.name)


@importer("ThresholdedRelu")
def _thresholded_relu(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    above = b.Compare(b.splat(float(ctx.attr("alpha", 1.0)), x), x, predicate="lt")
    return b.Select(above, x, b.splat(0.0, x), name=ctx.name)


@importer("Softplus", "Softsign", "Mish")
def _smooth(ctx: NodeContext) -> Node:
    x, b = ctx.node(0), ctx.b
    if ctx.op_type == "Softplus":
        return softplus(b, x)
    if ctx.op_type == "Mish":
        return b.Mish(x, name=ctx.name)
    return b.Div(x, b.Add(b.splat(1.0, x), build.absolute(b, x)), name=ctx.name)


@importer("Gelu")
def _gelu(ctx: NodeContext) -> Node:
    """One Gelu node, exact (erf) or with the tanh approximation."""
    approximate = ctx.attr("approximate", "none")
    if approximate not in GELU_APPROXIMATIONS:
        raise ctx.refuse(f"approximate={approximate!r} is not one of 'none', 'tanh'")
    return ctx.b.Gelu(ctx.node(0), approximate=approximate, name=ctx.name)


@importer("Swish")
def _swish(ctx: NodeContext) -> Node:
    """One Swish node: x * sigmoid(alpha * x)."""
    return ctx.b.Swish(ctx.node(0), alpha=float(ctx.attr("alpha", 1.0)), name=ctx.name)


@importer("SwiGLU")
def _swiglu(ctx: NodeContext) -> Node:
    """Swish_alpha(A) * B (opset 28)."""
    swish = ctx.b.Swish(ctx.node(0), alpha=float(ctx.attr("alpha", 1.0)))
    return ctx.b.Mul(swish, ctx.node(1), name=ctx.name)


@importer("Shrink")
def _shrink(ctx: NodeContext) -> Node:
    """x - bias above lambd, x + bias below -lambd, else 0; integers are computed in float64
    and truncated back, as ONNX does (a float bias splatted into an int tensor would be cut)."""
    given, b = ctx.node(0), ctx.b
    x = given if given.type.elem.is_float else build.convert(b, given, ElemKind.float64)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    low = b.Compare(x, b.splat(-lambd, x), predicate="lt")
    high = b.Compare(b.splat(lambd, x), x, predicate="lt")
    zero = b.splat(0, x)
    inner = b.Select(high, b.Sub(x, b.splat(bias, x)), zero)
    if x is given:
        return b.Select(low, b.Add(x, b.splat(bias, x)), inner, name=ctx.name)
    y = b.Select(low, b.Add(x, b.splat(bias, x)), inner)
    return build.convert(b, y, given.type.elem, name=ctx.name)


@importer("PRelu")
def _prelu(ctx: NodeContext) -> Node:
    """x < 0 ? slope * x : x, slope broadcast to x: ONNX's piecewise form (a sum with
    slope * 0 would be NaN for an infinite slope)."""
    x, b = ctx.node(0), ctx.b
    slope = ctx.node(1)
    if slope.type.elem != x.type.elem:
        slope = build.convert(b, slope, x.type.elem)
    scaled = b.mul(x, slope)
    if scaled.type.shape != x.type.shape:
        raise ShapeError(f"slope {slope.type} must broadcast to the input {x.type} (unidirectionally)")
    return b.Select(b.Compare(x, b.splat(0, x), predicate="lt"), scaled, x, name=ctx.name)


# ---- trigonometric and hyperbolic functions -----------------------------------------------


def _asin(b: Builder, x: Node) -> Node:
    """atan(x / sqrt(1 - x^2)); at |x| = 1 the quotient is +-inf and atan gives +-pi/2."""
    return b.Atan(b.Div(x, b.Sqrt(b.Sub(b.splat(1.0, x), b.Mul(x, x)))))


def _trig(b: Builder, op: str, x: Node) -> Node:
    one, half = b.splat(1.0, x), b.splat(0.5, x)
    if op == "Tan":
        return b.Div(b.Sin(x), b.Cos(x))
    if op == "Asin":
        return _asin(b, x)
    if op == "Acos":
        return b.Sub(b.splat(math.pi / 2, x), _asin(b, x))
    if op in ("Sinh", "Cosh"):
        grow, decay = b.Exp(x), b.Exp(build.negate(b, x))
        return b.Mul(b.Sub(grow, decay) if op == "Sinh" else b.Add(grow, decay), half)
    if op == "Asinh":  # sign(x) * log(|x| + sqrt(x^2 + 1)), no cancellation for x < 0
        size = build.absolute(b, x)
        magnitude = b.Log(b.Add(size, b.Sqrt(b.Add(b.Mul(x, x), one))))
        return b.Select(b.Compare(x, b.splat(0.0, x), predicate="lt"), build.negate(b, magnitude), magnitude)
    if op == "Acosh":
        return b.Log(b.Add(x, b.Sqrt(b.Sub(b.Mul(x, x), one))))
    # Atanh
    return b.Mul(b.Log(b.Div(b.Add(one, x), b.Sub(one, x))), half)


_PRIMITIVE_TRIG = {"Sin": "Sin", "Cos": "Cos", "Atan": "Atan"}
_LOWERED_TRIG = ("Tan", "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")


@importer(*_PRIMITIVE_TRIG, *_LOWERED_TRIG)
def _trigonometric(ctx: NodeContext) -> Node:
    x = ctx.node(0)
    if ctx.op_type in _PRIMITIVE_TRIG:
        return ctx.b.create(_PRIMITIVE_TRIG[ctx.op_type], x, name=ctx.name)
    return _trig(ctx.b, ctx.op_type, x)
