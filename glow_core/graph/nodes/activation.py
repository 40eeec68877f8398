"""Activation nodes accelerators implement as one unit: Gelu, Swish (SiLU), HardSigmoid,
HardSwish, Mish, and LogSoftmax.

Each lowering is the formula the ONNX importer used to emit inline, unchanged, so a backend
that lowers them computes bit for bit what it did before they became nodes; one that keeps
them gets the whole activation as one instruction.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from glow_core.spec import Attr, In, ex, expect, node, normalize_axis

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

GELU_APPROXIMATIONS = ("none", "tanh")
"""Gelu's ``approximate`` values, as ONNX names them: exact (erf) or the tanh formula."""


def _float_input(input: Type) -> Type:
    """The type rule of a float activation: the result has the input's type."""
    expect(input.elem.is_float, "the input must be a float tensor", input)
    return input


def _scaled(b: Builder, x: Node, factor: float) -> Node:
    return x if factor == 1.0 else b.Mul(x, b.splat(factor, x))


def softplus(b: Builder, x: Node) -> Node:
    """log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)), finite for any x."""
    zero = b.splat(0.0, x)
    magnitude = b.Max(x, b.Sub(b.splat(0, x), x))
    tail = b.Log(b.Add(b.splat(1.0, x), b.Exp(b.Sub(b.splat(0, x), magnitude))))
    return b.Add(b.Max(x, zero), tail)


@node
class Gelu:
    """x * Phi(x): exact, 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""

    input = In()
    approximate = Attr(str, "none", "none (erf) or tanh")
    examples = (ex("f32[3,4]"), ex("f32[3,4]", approximate="tanh"))

    def type(input, approximate):
        expect(
            approximate in GELU_APPROXIMATIONS,
            f"approximate={approximate!r} is not one of {GELU_APPROXIMATIONS}",
            input,
        )
        return _float_input(input)

    def lower(b, input, approximate):
        x = input
        half = b.Mul(x, b.splat(0.5, x))
        if approximate == "tanh":  # tanh(sqrt(2/pi) (x + 0.044715 x^3))
            inner = b.Add(x, b.Mul(b.Mul(b.Mul(x, x), x), b.splat(0.044715, x)))
            gate = b.Tanh(b.Mul(inner, b.splat(math.sqrt(2.0 / math.pi), x)))
        else:  # erf(x / sqrt(2))
            gate = b.Erf(b.Mul(x, b.splat(1.0 / math.sqrt(2.0), x)))
        return b.Mul(half, b.Add(gate, b.splat(1.0, x)))


@node
class Swish:
    """x * sigmoid(alpha x); SiLU is alpha = 1."""

    input = In()
    alpha = Attr(float, 1.0)
    examples = (ex("f32[3,4]"), ex("f32[3,4]", alpha=1.702))

    def type(input, alpha):
        return _float_input(input)

    def lower(b, input, alpha):
        return b.Mul(input, b.Sigmoid(_scaled(b, input, alpha)))


@node
class HardSigmoid:
    """clip(alpha x + beta, 0, 1)."""

    input = In()
    alpha = Attr(float, 0.2)
    beta = Attr(float, 0.5)
    examples = (ex("f32[3,4]"),)

    def type(input, alpha, beta):
        return _float_input(input)

    def lower(b, input, alpha, beta):
        linear = b.Add(b.Mul(input, b.splat(alpha, input)), b.splat(beta, input))
        return b.Clip(linear, low=0.0, high=1.0)


@node
class HardSwish:
    """x * clip(x / 6 + 1/2, 0, 1): x times a hard sigmoid with alpha 1/6, beta 1/2."""

    input = In()
    examples = (ex("f32[3,4]"),)

    def type(input):
        return _float_input(input)

    def lower(b, input):
        return b.Mul(input, b.HardSigmoid(input, alpha=1.0 / 6.0, beta=0.5))


@node
class Mish:
    """x * tanh(softplus(x)), with softplus written to stay finite for large x."""

    input = In()
    examples = (ex("f32[3,4]"),)

    def type(input):
        return _float_input(input)

    def lower(b, input):
        return b.Mul(input, b.Tanh(softplus(b, input)))


@node
class LogSoftmax:
    """(x - max) - log(sum(exp(x - max))) along ``axis``: never the log of a zero."""

    input = In()
    axis = Attr(int, -1)
    examples = (ex("f32[2,7]"), ex("f32[2,3,5]", axis=1))

    def type(input, axis):
        normalize_axis(axis, input.rank, input)
        return _float_input(input)

    def lower(b, input, axis):
        axes = (normalize_axis(axis, input.type.rank),)
        shape = input.type.shape
        shifted = b.Sub(input, b.Broadcast(b.ReduceMax(input, axes=axes), shape=shape))
        total = b.Log(b.ReduceSum(b.Exp(shifted), axes=axes))
        return b.Sub(shifted, b.Broadcast(total, shape=shape))
