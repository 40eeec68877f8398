"""Einsum: diagonals, reductions and pairwise contractions as BatchMatMul.

Each operand first loses repeated labels (a diagonal, gathered at equal coordinates) and
labels nobody else needs (summed out). Operands are then contracted left to right: shared
labels that stay are the batch, shared labels that go are the inner dimension, the rest
are rows and columns of one BatchMatMul. A final Transpose orders the output labels.
"""

from __future__ import annotations

import math
import string
from typing import TYPE_CHECKING

from glow_core.errors import ShapeError
from glow_core.graph.nodes.indexing import gather_at, iota
from glow_core.spec import Attr, In, ex, expect, node

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

Term = tuple["Node", str]


def _parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Operand and output labels, with "..." expanded to fresh upper-case labels."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ShapeError(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    spare = [c for c in string.ascii_uppercase if c not in equation]
    ellipsis_rank = max(
        (r - (len(t) - 3) for t, r in zip(terms, ranks, strict=True) if "..." in t), default=0
    )
    fresh = "".join(spare[:ellipsis_rank])
    expanded = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            count = rank - (len(term) - 3)
            term = term.replace("...", fresh[ellipsis_rank - count :])
        if len(term) != rank:
            raise ShapeError(f"term {term!r} does not match an operand of rank {rank}")
        expanded.append(term)
    if arrow:
        output = rhs.replace("...", fresh)
    else:  # implicit output: the ellipsis, then labels used once, alphabetically
        counts = {c: "".join(expanded).count(c) for c in "".join(expanded)}
        output = fresh + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in fresh))
    return expanded, output


def _diagonal(b: Builder, x: Node, labels: str) -> Term:
    """Keep one copy of each repeated label: elements where the repeated axes agree."""
    unique = "".join(dict.fromkeys(labels))
    if unique == labels:
        return x, labels
    sizes = {c: x.type.shape[labels.index(c)] for c in unique}
    shape = tuple(sizes[c] for c in unique)
    coords = [iota(shape, unique.index(c)) for c in labels]
    return b.reshape(gather_at(b, x, coords), shape), unique


def _sum_out(b: Builder, term: Term, keep: set[str]) -> Term:
    x, labels = term
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return term
    reduced = b.ReduceSum(x, axes=axes)
    kept = "".join(c for c in labels if c in keep)
    return b.reshape(reduced, tuple(x.type.shape[labels.index(c)] for c in kept)), kept


def _arranged(b: Builder, term: Term, order: str, sizes: dict[str, int]) -> Node:
    """The operand transposed to ``order`` and broadcast to the full label sizes."""
    x, labels = term
    perm = [labels.index(c) for c in order]
    if perm != list(range(len(perm))):
        x = b.Transpose(x, shuffle=tuple(perm))
    return b.broadcast_to(x, tuple(sizes[c] for c in order))


def _contract(b: Builder, left: Term, right: Term, keep: set[str]) -> Term:
    """One BatchMatMul: [batch, rows, inner] x [batch, inner, cols]."""
    la, lb = left[1], right[1]
    sizes: dict[str, int] = {}
    for x, labels in (left, right):  # a size-1 axis broadcasts against the other operand's
        for axis, c in enumerate(labels):
            sizes[c] = max(sizes.get(c, 1), x.type.shape[axis])
    batch = "".join(c for c in la if c in lb and c in keep)
    inner = "".join(c for c in la if c in lb and c not in keep)
    rows = "".join(c for c in la if c not in lb)
    cols = "".join(c for c in lb if c not in la)
    size = lambda labels: math.prod(sizes[c] for c in labels)  # noqa: E731 - local shorthand
    a = b.reshape(_arranged(b, left, batch + rows + inner, sizes), (size(batch), size(rows), size(inner)))
    c = b.reshape(_arranged(b, right, batch + inner + cols, sizes), (size(batch), size(inner), size(cols)))
    product = b.BatchMatMul(a, c)
    labels = batch + rows + cols
    return b.reshape(product, tuple(sizes[ch] for ch in labels)), labels


def _label_sizes(terms: list[str], types: list[Type]) -> dict[str, int]:
    """Each label's size: equal wherever it appears, or 1 (a size-1 axis broadcasts)."""
    sizes: dict[str, int] = {}
    for term, t in zip(terms, types, strict=True):
        for label, size in zip(term, t.shape, strict=True):
            known = sizes.get(label, size)
            if known != size and 1 not in (known, size):
                raise ShapeError(f"label {label!r} has sizes {known} and {size}")
            sizes[label] = max(known, size) if 1 in (known, size) else size
    return sizes


def _einsum_type(operands: list[Type], equation: str) -> Type:
    expect(len(operands) >= 1, "einsum needs at least one operand")
    first = operands[0]
    for t in operands:
        expect(t.elem == first.elem, "operands must share an element kind", *operands)
    terms, output = _parse(equation, [t.rank for t in operands])
    for term, t in zip(terms, operands, strict=True):
        repeated = {c: {t.shape[i] for i, d in enumerate(term) if d == c} for c in set(term)}
        for label, sizes in repeated.items():
            expect(
                len(sizes) == 1, f"label {label!r} repeats in {term!r} over axes of sizes {sorted(sizes)}", t
            )
    sizes = _label_sizes(terms, operands)
    missing = [c for c in output if c not in sizes]
    expect(not missing, f"output labels {missing} are not in the operands of {equation!r}", *operands)
    expect(len(set(output)) == len(output), f"output {output!r} repeats a label", *operands)
    return first.with_shape(tuple(sizes[c] for c in output))


def _lower_einsum(b: Builder, operands: list[Node], equation: str) -> Node:
    terms, output = _parse(equation, [x.type.rank for x in operands])
    pending = [_diagonal(b, x, t) for x, t in zip(operands, terms, strict=True)]
    for index, term in enumerate(pending):
        others = set(output).union(*(t for j, (_, t) in enumerate(pending) if j != index))
        pending[index] = _sum_out(b, term, others)
    result = pending[0]
    for index in range(1, len(pending)):
        later = set(output).union(*(t for _, t in pending[index + 1 :]))
        result = _contract(b, result, pending[index], later)
    x, labels = _sum_out(b, result, set(output))
    perm = tuple(labels.index(c) for c in output)
    if perm == tuple(range(len(perm))):
        return b.reshape(x, x.type.shape)
    return b.Transpose(x, shuffle=perm)


@node
class Einsum:
    """ONNX Einsum: the sum over every label not in the output of the product of the
    operands, indexed by the equation's labels (implicit output and "..." as ONNX defines)."""

    operands = In("one or more tensors, one per term of the equation", variadic=True)
    equation = Attr(str, doc="as ONNX writes it, e.g. bij,bjk->bik")
    examples = (
        ex("f32[2,3,4]", "f32[2,4,5]", equation="bij,bjk->bik"),
        ex("f32[3,3,4]", "f32[4]", equation="iij,j->i"),
        ex("f32[2,1,3]", "f32[4,3]", "f32[4,2]", equation="...j,kj,kl->...l"),
        ex("f32[3,4]", equation="ij"),
    )

    def type(operands, equation):
        return _einsum_type(operands, equation)

    def lower(b, operands, equation):
        return _lower_einsum(b, operands, equation)
