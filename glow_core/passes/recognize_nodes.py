"""Node recognition: primitive patterns exporters emit -> the high-level node they spell.

Exporters write attention as MatMul -> (Mul by a scale) -> Softmax -> MatMul and GELU as
x * 0.5 * (1 + erf(x / sqrt 2)); a backend with a fused attention or GELU kernel can only
use it if the graph says Attention or Gelu. Recognition runs on the optimized graph, before
lowering, and rewrites a match only when the backend keeps the node it builds
(``Backend.should_lower`` answers False for it): every other backend sees its graph
unchanged, so its numerics are what they were. A recognized node computes its own
declared semantics (Attention applies sqrt(scale) to Q and K rather than the scale to
their product), within float rounding of the pattern it replaces.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from glow_core.errors import ShapeError
from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node

Keeps = Callable[[Node], bool]
"""A node just built -> whether the backend keeps it (the rewrite is undone otherwise)."""


def recognize_nodes(fn: Function, keeps: Keeps) -> bool:
    """Rewrite every attention and GELU pattern into one node where ``keeps`` agrees."""
    changed = False
    for softmax in list(fn.nodes_of("Softmax")):
        if softmax in fn.nodes:
            changed |= _offer(fn, keeps, _match_attention(softmax))
    for erf in list(fn.nodes_of("Erf")):
        if erf in fn.nodes:
            changed |= _offer(fn, keeps, _match_gelu(erf))
    return changed


Match = tuple[list[Node], Callable[[Builder], Node]]
"""(the matched nodes, output last; a function building the replacement)."""


def _offer(fn: Function, keeps: Keeps, match: Match | None) -> bool:
    """Build the replacement; keep it if the backend does, else remove what was built."""
    if match is None:
        return False
    chain, make = match
    output = chain[-1]
    if any(n.predicate is not output.predicate for n in chain):
        return False
    before = len(fn.nodes)
    try:
        replacement = make(Builder(fn, prefix=f"{output.name}/", predicate=output.predicate))
    except ShapeError:  # the pattern's shapes are not ones the node accepts
        replacement = None
    built = fn.nodes[before:]
    if replacement is None or replacement.type != output.type or not keeps(replacement):
        for n in reversed(built):
            fn.erase(n)
        return False
    fn.replace_all_uses(output, replacement)
    for n in reversed(chain):
        if not n.users:
            fn.erase(n)
    return True


def _scalar(n: Node) -> float | None:
    """The value of a splatted, or broadcast one-element, constant; else None."""
    while n.kind in ("Broadcast", "Reshape"):
        n = n.inputs[0]
    if n.kind == "Splat":
        return float(n.value)
    if isinstance(n, Constant) and n.value.size == 1 and n.type.elem.is_float:
        return float(n.value.reshape(-1)[0])
    return None


def _is(value: float | None, expected: float) -> bool:
    return value is not None and math.isclose(value, expected, rel_tol=1e-6)


def _only_user(n: Node) -> Node | None:
    return n.users[0][0] if len(n.users) == 1 else None


def _other(n: Node, operand: Node) -> Node:
    """The operand of the binary ``n`` that is not ``operand``."""
    lhs, rhs = n.inputs
    return rhs if lhs is operand else lhs


# ---- attention ----------------------------------------------------------------------------


def _unfolded_batch_matmul(n: Node) -> tuple[Node, Node] | None:
    """(lhs, rhs) of a 4-D matmul spelled Reshape(BatchMatMul(Reshape(lhs), Reshape(rhs))),
    as the builder's ``matmul`` emits for [B, H, m, k] x [B, H, k, n]."""
    if n.kind != "Reshape" or n.inputs[0].kind != "BatchMatMul" or n.type.rank != 4:
        return None
    lhs, rhs = n.inputs[0].inputs
    if lhs.kind != "Reshape" or rhs.kind != "Reshape":
        return None
    lhs4, rhs4 = lhs.inputs[0], rhs.inputs[0]
    if lhs4.type.rank != 4 or rhs4.type.rank != 4 or lhs4.type.shape[:2] != n.type.shape[:2]:
        return None
    return lhs4, rhs4


def _match_attention(softmax: Node) -> Match | None:
    """Reshape(BatchMatMul(Reshape(Softmax(scores * c)), Reshape(V))) with scores = Q K^T."""
    if softmax.type.rank != 4 or softmax.axis % 4 != 3:
        return None
    scaled, scale = softmax.inputs[0], 1.0
    scores = scaled
    if scaled.kind in ("Mul", "Div"):
        for side in (1, 0) if scaled.kind == "Mul" else (1,):
            factor = _scalar(scaled.inputs[side])
            if factor is not None and factor != 0.0:
                scale = factor if scaled.kind == "Mul" else 1.0 / factor
                scores = scaled.inputs[1 - side]
                break
    product = _unfolded_batch_matmul(scores)
    flat = _only_user(softmax)  # the probabilities as [B*H, Sq, Skv]
    mix = _only_user(flat) if flat is not None else None
    output = _only_user(mix) if mix is not None else None
    context = _unfolded_batch_matmul(output) if output is not None else None
    if product is None or context is None or context[0] is not softmax:
        return None
    assert flat is not None and mix is not None and output is not None
    query, key_t = product
    value = context[1]
    chain = [*scores.inputs[0].inputs, scores.inputs[0], scores]
    chain += ([scaled] if scaled is not scores else []) + [softmax, flat, mix.inputs[1], mix, output]
    if any(len(n.users) != 1 for n in chain[:-1]):
        return None

    def make(b: Builder) -> Node:
        key = b.Transpose(key_t, shuffle=(0, 1, 3, 2))
        return b.Attention(query, key, value, scale=scale, name=f"{output.name}/attention")

    return chain, make


# ---- GELU -----------------------------------------------------------------------------------


def _erf_argument(erf: Node) -> Node | None:
    """x of erf(x / sqrt 2) or erf(x * (1 / sqrt 2))."""
    inner = erf.inputs[0]
    if inner.kind == "Div" and _is(_scalar(inner.inputs[1]), math.sqrt(2.0)):
        return inner.inputs[0]
    if inner.kind == "Mul":
        for side in (0, 1):
            if _is(_scalar(inner.inputs[side]), 1.0 / math.sqrt(2.0)):
                return inner.inputs[1 - side]
    return None


def _completes(partner: Node, last: Node, x: Node) -> bool:
    """Whether ``partner`` (gate's factor) and ``last`` (the outer factor) are x and 0.5."""
    if partner is x:
        return _is(_scalar(last), 0.5)
    return last is x and _is(_scalar(partner), 0.5)


def _match_gelu(erf: Node) -> Match | None:
    """x * (1 + erf(x / sqrt 2)) * 0.5, the factors multiplied in any order."""
    x = _erf_argument(erf)
    gate = _only_user(erf)
    if x is None or gate is None or gate.kind != "Add" or not _is(_scalar(_other(gate, erf)), 1.0):
        return None
    first = _only_user(gate)
    if first is None or first.kind != "Mul":
        return None
    partner = _other(first, gate)
    if partner.kind == "Mul" and x in partner.inputs and _is(_scalar(_other(partner, x)), 0.5):
        output, chain = first, [erf.inputs[0], erf, gate, partner, first]  # (x * 0.5) * gate
    else:  # (x * gate) * 0.5 or (0.5 * gate) * x
        outer = _only_user(first)
        if outer is None or outer.kind != "Mul" or not _completes(partner, _other(outer, first), x):
            return None
        output, chain = outer, [erf.inputs[0], erf, gate, first, outer]
    if any(len(n.users) != 1 for n in chain[:-1]):
        return None
    return chain, lambda b: b.Gelu(x, name=f"{output.name}/gelu")
