"""The target-independent graph passes, one small function each.

Each docstring gives the rewrite. Passes edit the function in place and return whether
they changed it; they never call other passes (the pipeline does).
"""

from __future__ import annotations

import numpy as np

from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.limits import current_limits
from glow_core.passes.manager import graph_pass

# A folded constant may not be much larger than what it is computed from: folding a
# Broadcast or a Splat would trade a cheap runtime op for bytes in every bundle.
_FOLD_GROWTH_LIMIT = 64


@graph_pass("dce")
def eliminate_dead_code(fn: Function) -> bool:
    """Erase nodes nobody reads (Saves are the roots) and private constants nobody reads."""
    changed = False
    for n in reversed(fn.topological_order()):
        if not n.users and n.kind != "Save":
            fn.erase(n)
            changed = True
    return fn.module.drop_unused_constants() > 0 or changed


@graph_pass("cse")
def eliminate_common_subexpressions(fn: Function) -> bool:
    """Two nodes of one kind with the same operands, attributes and predicate become one."""
    # Keyed first on what is cheap to hash (kind, operand and predicate identities); the
    # attributes and type are compared only between nodes that share that key, which in an
    # unrolled model is rare, so most nodes never have their attributes printed.
    buckets: dict[tuple, list[tuple[Node, tuple | None]]] = {}
    changed = False
    for n in fn.topological_order():
        if n.kind == "Save":
            continue
        cheap = (n.kind, tuple(map(id, n.inputs)), id(n.predicate))
        candidates = buckets.get(cheap)
        if candidates is None:
            buckets[cheap] = [(n, None)]
            continue
        twin = _same_node(n, candidates)
        if twin is None:
            continue
        fn.replace_all_uses(n, twin)
        fn.erase(n)
        changed = True
    return changed


def _cse_detail(n: Node) -> tuple:
    """The part of a CSE key beyond kind and operands: attributes and result type.

    repr tells apart attribute values that == confuses: -0.0 vs 0.0, 1 vs 1.0 vs True."""
    return (repr(sorted(n.attrs.items())), n.type)


def _same_node(n: Node, candidates: list[tuple[Node, tuple | None]]) -> Node | None:
    """The first candidate (in order seen) equal to ``n`` in attributes and type, else None
    after adding ``n`` as a candidate; each candidate's detail is computed once."""
    detail = _cse_detail(n)
    for index, (other, other_detail) in enumerate(candidates):
        if other_detail is None:
            other_detail = _cse_detail(other)
            candidates[index] = (other, other_detail)
        if other_detail == detail:
            return other
    candidates.append((n, detail))
    return None


def _is_noop(n: Node) -> bool:
    if n.kind == "Slice" and any(step != 1 for step in n.steps or ()):
        return False  # a reversing or strided slice can keep its input's type
    if n.kind in ("Reshape", "Broadcast", "Transpose", "Slice", "Pad", "Convert") or (
        n.kind == "Concat" and len(n.inputs) == 1
    ):
        return n.inputs[0].type == n.type and (
            n.kind != "Transpose" or n.shuffle == tuple(range(n.type.rank))
        )
    return False


@graph_pass("eliminate-noops")
def eliminate_noops(fn: Function) -> bool:
    """Reshape/Broadcast to the same shape, identity Transpose, full Slice, zero Pad -> input."""
    changed = False
    for n in fn.topological_order():
        if _is_noop(n):
            fn.replace_all_uses(n, n.inputs[0])
            fn.erase(n)
            changed = True
    return changed


def _concat_operand_sliced(n: Node) -> Node | None:
    """The Concat operand a unit-step Slice reads exactly (None when it reads any other range)."""
    concat = n.inputs[0]
    if concat.kind != "Concat" or any(step != 1 for step in n.steps or ()):
        return None
    axis = concat.axis % concat.type.rank
    full = [(0, d) for d in concat.type.shape]
    start = 0
    for part in concat.inputs:
        span = part.type.shape[axis]
        wanted = [(start, start + span) if i == axis else full[i] for i in range(concat.type.rank)]
        if list(zip(n.starts, n.ends, strict=True)) == wanted:
            return part
        start += span
    return None


@graph_pass("forward-concat-slices")
def forward_concat_slices(fn: Function) -> bool:
    """Slice(Concat(a, b, c)) that reads exactly b -> b: packed results (a recurrence's Y and
    final states) are read without a copy."""
    changed = False
    for n in fn.nodes_of("Slice"):
        part = _concat_operand_sliced(n)
        if part is not None and n in fn:
            fn.replace_all_uses(n, part)
            fn.erase(n)
            changed = True
    return changed


@graph_pass("merge-reshapes")
def merge_reshapes(fn: Function) -> bool:
    """Reshape(Reshape(x)) -> Reshape(x): only the last shape matters."""
    changed = False
    for n in fn.nodes_of("Reshape"):
        inner = n.inputs[0]
        if inner.kind == "Reshape":
            n.set_input(0, inner.inputs[0])
            changed = True
    return changed


@graph_pass("fold-transpose-pairs")
def fold_transpose_pairs(fn: Function) -> bool:
    """Transpose(Transpose(x, p), q) -> Transpose(x, p∘q); identity shuffles vanish later."""
    changed = False
    for n in fn.nodes_of("Transpose"):
        inner = n.inputs[0]
        if inner.kind != "Transpose" or n not in fn:
            continue
        shuffle = tuple(inner.shuffle[i] for i in n.shuffle)
        merged = Builder(fn, predicate=n.predicate).Transpose(
            inner.inputs[0], shuffle=shuffle, name=n.name + "/merged"
        )
        fn.replace_all_uses(n, merged)
        fn.erase(n)
        changed = True
    return changed


def _splat_value(n: Node) -> float | None:
    return n.value if n.kind == "Splat" else None


@graph_pass("simplify-arithmetic")
def simplify_arithmetic(fn: Function) -> bool:
    """x + 0 -> x, x - 0 -> x, x * 1 -> x, x / 1 -> x, for splatted 0 and 1."""
    identities = {"Add": (0, (0, 1)), "Sub": (0, (1,)), "Mul": (1, (0, 1)), "Div": (1, (1,))}
    changed = False
    for n in fn.topological_order():
        rule = identities.get(n.kind)
        if rule is None:
            continue
        neutral, sides = rule
        for side in sides:
            if _splat_value(n.inputs[side]) == neutral:
                other = n.inputs[1 - side]
                fn.replace_all_uses(n, other)
                fn.erase(n)
                changed = True
                break
    return changed


def _static_value(n: Node) -> np.ndarray | None:
    """The value of a Constant or a Splat, else None."""
    if isinstance(n, Constant):
        return n.value
    if n.kind == "Splat":
        return n.spec.evaluate([], n.attrs)
    return None


@graph_pass("fold-constants")
def fold_constants(fn: Function) -> bool:
    """A primitive whose operands are all Constants (or Splats) becomes a Constant."""
    changed = False
    for n in fn.topological_order():
        if not n.spec.is_primitive or not n.inputs:
            continue
        if not all(isinstance(i, Constant) or i.kind == "Splat" for i in n.inputs):
            continue
        if n.spec.selecting_kind(n.type, [i.type for i in n.inputs]) not in n.spec.kinds:
            continue  # the primitive has no semantics for this kind (Sub of bools): left for the
            # backend's support check to refuse by name, never run through its reference

        # Sizes from the types, before any operand is materialized: a Splat is only a
        # value and a shape until evaluated. Folding is an optimization, so a result over
        # the per-tensor budget simply stays a node.
        source_bytes = sum(i.type.nbytes for i in n.inputs)
        if n.type.nbytes > min(max(_FOLD_GROWTH_LIMIT, source_bytes), current_limits().max_tensor_bytes):
            continue
        operands = [_static_value(i) for i in n.inputs]
        value = np.asarray(n.spec.evaluate(operands, n.attrs))
        const = fn.module.create_constant(n.name, value.astype(n.type.dtype).reshape(n.type.shape))
        fn.replace_all_uses(n, const)
        fn.erase(n)
        changed = True
    return changed
