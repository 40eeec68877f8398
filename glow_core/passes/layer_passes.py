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

_FOLD_CHUNK_BYTES = 1 << 20
"""Float64 rows of a weight tensor scaled at a time: the folded weights are the only
whole-tensor allocation, whatever the layer's size."""


def _constant_values(nodes: tuple[Node, ...]) -> list[np.ndarray] | None:
    """The values of ``nodes`` in float64, or None unless all are constants (small
    per-channel tensors: the layer's weights are scaled by ``_scaled_weights`` instead)."""
    if all(isinstance(n, Constant) for n in nodes):
        return [n.value.astype(np.float64) for n in nodes]  # type: ignore[attr-defined]
    return None


def _scaled_weights(weights: np.ndarray, scale: np.ndarray, per_row: bool, dtype: np.dtype) -> np.ndarray:
    """``(weights * scale).astype(dtype)`` computed in float64, a block of rows at a time;
    ``scale`` is per row (a Conv's output channels) or per column (a FullyConnected's).

    Each element is rounded once from its float64 product, as when the whole tensor is
    converted, so the result is bit for bit the same; the float64 copies are one block
    (a ResNet-50 3x3 layer's whole filter would be 19 MB twice over, and such freed
    blocks stay in the C heap, where the compile's later peaks stack on them).
    """
    folded = np.empty(weights.shape, dtype)
    rows = max(1, _FOLD_CHUNK_BYTES // max(1, 8 * weights[0].size)) if weights.size else 1
    for start in range(0, len(weights), rows):
        block = slice(start, start + rows)
        block_scale = scale[block].reshape(-1, *(1,) * (weights.ndim - 1)) if per_row else scale
        folded[block] = weights[block].astype(np.float64) * block_scale
    return folded


def _drop_if_unread(fn: Function, nodes: list[Node]) -> None:
    """Drop replaced constants that nothing reads any more from the module now, so their
    arrays are freed as each layer is folded instead of when ``dce`` runs after all of them."""
    for node in nodes:
        if isinstance(node, Constant) and not node.users and fn.module.constants.get(node.name) is node:
            del fn.module.constants[node.name]


@graph_pass("fold-batchnorm")
def fold_batchnorm(fn: Function) -> bool:
    """BatchNorm(Conv(x, w, b)) -> Conv(x, w*s, (b-mean)*s+beta), s = gamma/sqrt(var+eps).

    The same for FullyConnected (channels are its output columns). Needs constant
    weights and parameters and a producer read only by the BatchNorm. The arithmetic is
    float64, rounded once to the weights' kind; the unfolded constants leave the module
    as soon as nothing reads them (one copy of the weights at a time, not two).
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
        if (
            params is None
            or not all(isinstance(n, Constant) for n in layer.inputs[1:])
            or (layer.kind == "FullyConnected" and bn.type.rank != 2)
        ):
            continue
        gamma, beta, mean, var = params
        weights, bias = layer.inputs[1].value, layer.inputs[2].value.astype(np.float64)
        scale = gamma / np.sqrt(var + bn.epsilon)
        # Conv filters are [Cout, ...]; FullyConnected weights are [k, m] with m the channel.
        dtype = layer.inputs[1].type.dtype
        folded = _scaled_weights(weights, scale, layer.kind == "Conv", dtype)
        new_w = fn.module.create_constant(f"{layer.name}/folded_weights", folded)
        new_b = fn.module.create_constant(
            f"{layer.name}/folded_bias", ((bias - mean) * scale + beta).astype(dtype)
        )
        fused = Builder(fn, predicate=bn.predicate).create(
            layer.kind, layer.inputs[0], new_w, new_b, name=f"{layer.name}+bn", **layer.attrs
        )
        replaced = [*layer.inputs[1:], *bn.inputs[1:]]
        fn.replace_all_uses(bn, fused)
        fn.erase(bn)
        fn.erase(layer)
        del weights  # the unfolded array goes with its constant
        _drop_if_unread(fn, replaced)
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
