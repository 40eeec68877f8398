"""Element-wise math beyond ``elementwise.py``: Floor, Sin, Cos, Atan.

Each is here because no exact lowering exists: Ceil, Round, Mod and integer-valued casts
need Floor; Tan is Sin/Cos; Asin, Acos and the other inverse trigonometric functions are
Atan of an algebraic expression. Everything else (Sinh, Asinh, Softplus...) lowers to Exp
and Log, which the core already has.
"""

from __future__ import annotations

import numpy as np

from glow_core.primitives.elementwise import _negate, _unary


def _floor_grad(b, node, out_grad):
    return (None,)  # a step function: zero almost everywhere


def _sin_grad(b, node, out_grad):
    return (b.Mul(out_grad, b.Cos(node.input)),)


def _cos_grad(b, node, out_grad):
    return (_negate(b, b.Mul(out_grad, b.Sin(node.input))),)


def _atan_grad(b, node, out_grad):
    x = node.input
    return (b.Div(out_grad, b.Add(b.splat(1.0, x), b.Mul(x, x))),)


Floor = _unary(
    "Floor", "Element-wise largest integer not greater than x (float kinds).", np.floor, grad=_floor_grad
)
Sin = _unary("Sin", "Element-wise sine (radians).", np.sin, core=False, grad=_sin_grad)
Cos = _unary("Cos", "Element-wise cosine (radians).", np.cos, core=False, grad=_cos_grad)
Atan = _unary("Atan", "Element-wise arc tangent, in (-pi/2, pi/2).", np.arctan, core=False, grad=_atan_grad)
