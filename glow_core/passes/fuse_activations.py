"""Activation fusion: Relu(Conv(...)) -> Conv(..., activation=relu), where the backend says so.

Glow's ``fuseActivation``: a backend with a convolution or GEMM kernel that applies an
activation as it stores (and that keeps Conv/FullyConnected unlowered for that kernel) gets
one node instead of two, so the activation costs no extra pass over memory. Whether a pair
fuses is the backend's call (``Backend.supports_fused_activation``); for every other backend
this pass changes nothing. It runs on high-level nodes, after BatchNorm folding (so
Conv -> BatchNorm -> Relu has become Conv -> Relu) and before lowering.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.graph.activations import ACTIVATION_OF_KIND, FUSED_ACTIVATIONS, LAYER_KINDS
from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Node

Supports = Callable[[Node, Node], bool]
"""(layer, activation node) -> whether the backend runs that layer with that activation fused."""


def fusable_pair(activation: Node) -> Node | None:
    """The layer ``activation`` can fold into, or None: a Conv/FullyConnected without an
    activation yet, read by nothing else, under the same predicate."""
    if activation.kind not in ACTIVATION_OF_KIND:
        return None
    layer = activation.inputs[0]
    if (
        layer.kind not in LAYER_KINDS
        or layer.attrs["activation"] != "none"
        or len(layer.users) != 1
        or layer.predicate is not activation.predicate
    ):
        return None
    return layer


def fuse_activations(fn: Function, supports: Supports) -> bool:
    """Fold every Relu/Clip into the Conv/FullyConnected it follows when ``supports`` agrees."""
    changed = False
    for activation in fn.topological_order():
        layer = fusable_pair(activation)
        if layer is None or not supports(layer, activation):
            continue
        name = ACTIVATION_OF_KIND[activation.kind]
        attrs = {
            **layer.attrs,
            "activation": name,
            "activation_args": FUSED_ACTIVATIONS[name].args_of(activation.attrs),
        }
        fused = Builder(fn, predicate=layer.predicate).create(
            layer.kind, *layer.inputs, name=f"{layer.name}+{name}", **attrs
        )
        fn.replace_all_uses(activation, fused)
        fn.erase(activation)
        fn.erase(layer)
        changed = True
    return changed
