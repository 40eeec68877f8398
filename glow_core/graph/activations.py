"""Activations a Conv or FullyConnected node may carry fused (Glow's ``fusedActivation``).

A backend that keeps Conv/FullyConnected for a fused kernel says which activations that
kernel applies as it stores (``BackendInfo.fused_activations``); the ``fuse-activations``
pass then folds a following Relu or Clip into the layer's ``activation`` attribute. The
layer's lowering applies the activation after the bias, so a backend that lowers the layer
computes exactly what the unfused graph did. This table is the one place that says which
activation node becomes which attribute value and how it is built again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glow_core.spec import expect
from glow_core.types import Type

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node


@dataclass(frozen=True)
class FusedActivation:
    """One fusable activation: the node kind it replaces and how to rebuild it."""

    node_kind: str
    arity: int
    """How many ``activation_args`` the layer carries for it."""
    args_of: Callable[[dict[str, Any]], tuple[float, ...]]
    """The activation node's attributes -> the layer's ``activation_args``."""
    build: Callable[[Builder, Node, tuple[float, ...]], Node]
    """Apply the activation to a value (the layer's lowering calls it after the bias)."""


FUSED_ACTIVATIONS: dict[str, FusedActivation] = {
    "relu": FusedActivation("Relu", 0, lambda attrs: (), lambda b, x, args: b.Relu(x)),
    "clip": FusedActivation(
        "Clip",
        2,
        lambda attrs: (float(attrs["low"]), float(attrs["high"])),
        lambda b, x, args: b.Clip(x, low=args[0], high=args[1]),
    ),
}
"""Attribute value -> activation. ``none`` (the default) means no activation."""

ACTIVATION_OF_KIND = {a.node_kind: name for name, a in FUSED_ACTIVATIONS.items()}
"""Activation node kind (``Relu``) -> attribute value (``relu``)."""

LAYER_KINDS = ("Conv", "FullyConnected")
"""The node kinds that carry an ``activation`` attribute (and so can take a fused one)."""


def check_activation(activation: str, args: tuple, result: Type) -> None:
    """The type rule's check of a layer's ``activation`` and ``activation_args``."""
    known = ["none", *FUSED_ACTIVATIONS]
    expect(activation in known, f"unknown activation {activation!r}; known: {known}", result)
    wanted = FUSED_ACTIVATIONS[activation].arity if activation != "none" else 0
    expect(len(args) == wanted, f"activation {activation!r} takes {wanted} argument(s), got {args}", result)
    if activation == "clip":
        expect(args[0] <= args[1], f"clip range {args} is empty", result)


def apply_activation(b: Builder, value: Node, activation: str, args: tuple[float, ...]) -> Node:
    """``value`` with the layer's activation applied (unchanged for ``none``)."""
    return value if activation == "none" else FUSED_ACTIVATIONS[activation].build(b, value, args)
