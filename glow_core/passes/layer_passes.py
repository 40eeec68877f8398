"""Graph passes that rewrite whole layers: BatchNorm folding and transpose sinking.

BatchNorm folding works on high-level nodes (before lowering), where a Conv or
FullyConnected is still one node with constant weights; transpose sinking works on
element-wise primitives (after lowering), where most transposes meet them.
"""

from __future__ import annotations

import numpy as np

from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.passes.manager import graph_pass


def _constant_values(nodes: tuple[Node, ...]) -> list[np.ndarray] | None:
    if all(isinstance(n, Constant) for n in nodes):
        return [n.value.astype(np.float64) for n in nodes]  # type: ignore[attr-defined]
    return None


@graph_pass("fold-batchnorm")
def fold_batchnorm(fn: Function) -> bool:
    """BatchNorm(Conv(x, w, b)) -> Conv(x, w*s, (b-mean)*s+beta), s = gamma/sqrt(var+eps).

    The same for FullyConnected (channels are its output columns). Needs constant
    weights and parameters and a producer read only by the BatchNorm.
    """
    changed = False
    for bn in fn.nodes_of("BatchNorm"):
        layer = bn.inputs[0]
        if (
            layer.kind not in ("Conv", "FullyConnected")
            or len(layer.users) != 1
            or layer.predicate is not bn.predicate
            or layer.activation != "none"  # an activation sits between the layer and the BatchNorm
        ):
            continue
        params = _constant_values(bn.inputs[1:])
        weights = _constant_values(layer.inputs[1:])
        if params is None or weights is None or (layer.kind == "FullyConnected" and bn.type.rank != 2):
            continue
        gamma, beta, mean, var = params
        w, b = weights
        scale = gamma / np.sqrt(var + bn.epsilon)
        # Conv filters are [Cout, ...]; FullyConnected weights are [k, m] with m the channel.
        w = w * (scale.reshape(-1, 1, 1, 1) if layer.kind == "Conv" else scale)
        b = (b - mean) * scale + beta
        dtype = layer.inputs[1].type.dtype
        new_w = fn.module.create_constant(f"{layer.name}/folded_weights", w.astype(dtype))
        new_b = fn.module.create_constant(f"{layer.name}/folded_bias", b.astype(dtype))
        fused = Builder(fn, predicate=bn.predicate).create(
            layer.kind, layer.inputs[0], new_w, new_b, name=f"{layer.name}+bn", **layer.attrs
        )
        fn.replace_all_uses(bn, fused)
        fn.erase(bn)
        fn.erase(layer)
        changed = True
    return changed


@graph_pass("sink-transposes")
def sink_transposes(fn: Function) -> bool:
    """op(Transpose(a, p), Transpose(b, p) | Splat) -> Transpose(op(a, b), p) for element-wise op.

    Moving transposes below element-wise work lets them meet (and cancel with) each other
    and shrinks the work done in the transposed layout to one node.
    """
    changed = False
    for n in fn.topological_order():
        if not n.spec.elementwise or n.kind == "Save":
            continue
        transposes = [i for i in n.inputs if i.kind == "Transpose"]
        if not transposes or any(i.kind not in ("Transpose", "Splat") for i in n.inputs):
            continue
        shuffle = transposes[0].shuffle
        # Only when this node is each transpose's sole reader: k transposes become one.
        if any(t.shuffle != shuffle or len(t.users) != 1 for t in transposes):
            continue
        b = Builder(fn, prefix=f"{n.name}/", predicate=n.predicate)
        source_shape = transposes[0].inputs[0].type.shape
        operands = [
            i.inputs[0] if i.kind == "Transpose" else b.Splat(shape=source_shape, value=i.value, elem=i.elem)
            for i in n.inputs
        ]
        inner = b.create(n.kind, *operands, name=f"{n.name}/untransposed", **n.attrs)
        outer = b.Transpose(inner, shuffle=shuffle, name=f"{n.name}/sunk")
        fn.replace_all_uses(n, outer)
        fn.erase(n)
        changed = True
    return changed
