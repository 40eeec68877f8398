"""What ONNX says about each recurrent cell: its gates, directions and activations.

The facts the type rule checks against (``recurrent.py``) and the lowering builds from
(``recurrent_lowering.py``): how many H-wide gate blocks the weights hold, the activations a
direction applies by default, and every activation ONNX names with its alpha/beta defaults,
as a builder of primitives and nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glow_core.graph.nodes.activation import softplus
from glow_core.spec import expect

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
"""Gates per cell: how many H-wide blocks W, R and each half of B hold."""

DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
"""ONNX's activations for one direction: f, g (and h for LSTM)."""

DIRECTIONS = ("forward", "reverse", "bidirectional")

ACTIVATION_DEFAULTS: dict[str, tuple[float, float]] = {
    "Sigmoid": (0.0, 0.0),
    "Tanh": (0.0, 0.0),
    "Relu": (0.0, 0.0),
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01, 0.0),
    "ScaledTanh": (1.0, 1.0),
    "HardSigmoid": (0.2, 0.5),
    "Softsign": (0.0, 0.0),
    "Softplus": (0.0, 0.0),
}
"""Every ONNX recurrent activation with its (alpha, beta) when the model gives none; the
activations that take no parameter ignore theirs."""

Activation = Callable[["Builder", "Node"], "Node"]


def canonical_activation(name: str) -> str | None:
    """The activation's spelling in ``ACTIVATION_DEFAULTS`` (ONNX names are case-insensitive)."""
    return next((k for k in ACTIVATION_DEFAULTS if k.lower() == name.lower()), None)


def _activation(name: str, alpha: float, beta: float) -> Activation:
    """The activation ``name`` with its parameters, as a builder of primitives and nodes."""

    def scaled(b: Builder, x: Node, factor: float) -> Node:
        return b.Mul(x, b.splat(factor, x))

    def absolute(b: Builder, x: Node) -> Node:
        return b.Max(x, b.Sub(b.splat(0, x), x))

    table: dict[str, Activation] = {
        "Sigmoid": lambda b, x: b.Sigmoid(x),
        "Tanh": lambda b, x: b.Tanh(x),
        "Relu": lambda b, x: b.Relu(x),
        "Affine": lambda b, x: b.Add(scaled(b, x, alpha), b.splat(beta, x)),
        "LeakyRelu": lambda b, x: b.LeakyRelu(x, alpha=alpha),
        "ScaledTanh": lambda b, x: scaled(b, b.Tanh(scaled(b, x, beta)), alpha),
        "HardSigmoid": lambda b, x: b.Clip(b.Add(scaled(b, x, alpha), b.splat(beta, x)), low=0.0, high=1.0),
        "Softsign": lambda b, x: b.Div(x, b.Add(b.splat(1.0, x), absolute(b, x))),
        "Softplus": softplus,
    }
    return table[name]


def activation_specs(op: str, dirs: int, attrs: dict[str, Any]) -> list[list[tuple[str, float, float]]]:
    """Per direction, the cell's activations as (name in ``ACTIVATION_DEFAULTS``, alpha,
    beta): ONNX indexes ``activation_alpha``/``beta`` by the activation's position in the
    whole list, and an activation given none takes its default. A backend that runs a kept
    recurrence reads its activations here, as the lowering does (``activation_plan``)."""
    names = list(attrs["activations"]) or list(DEFAULT_ACTIVATIONS[op]) * dirs
    alphas, betas = attrs["activation_alpha"], attrs["activation_beta"]
    specs = []
    for i, given in enumerate(names):
        name = canonical_activation(given)
        assert name is not None  # the type rule refused unknown names
        alpha, beta = ACTIVATION_DEFAULTS[name]
        specs.append((name, alphas[i] if i < len(alphas) else alpha, betas[i] if i < len(betas) else beta))
    per = len(DEFAULT_ACTIVATIONS[op])
    return [specs[d * per : (d + 1) * per] for d in range(dirs)]


def activation_plan(op: str, dirs: int, attrs: dict[str, Any]) -> list[list[Activation]]:
    """Per direction, the cell's activations with their alpha/beta resolved, as builders."""
    return [[_activation(*spec) for spec in direction] for direction in activation_specs(op, dirs, attrs)]


def check_activations(op: str, dirs: int, attrs: dict[str, Any], x: Type) -> None:
    names = attrs["activations"]
    per = len(DEFAULT_ACTIVATIONS[op])
    if names:
        count = f"{op} takes {per} activations per direction ({dirs} direction{'s' * (dirs > 1)})"
        expect(len(names) == per * dirs, f"activations {list(names)}: {count}", x)
    unknown = [n for n in names if canonical_activation(n) is None]
    expect(not unknown, f"{unknown} are not ONNX recurrent activations {list(ACTIVATION_DEFAULTS)}", x)
    for key in ("activation_alpha", "activation_beta"):
        values = attrs[key]
        expect(all(isinstance(v, int | float) for v in values), f"{key} must be numbers", x)
        expect(len(values) <= max(len(names), per * dirs), f"{key} has more entries than activations", x)
