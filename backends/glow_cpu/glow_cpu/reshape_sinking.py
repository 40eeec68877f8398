"""Reshapes moved below element-wise work, so a MatMul's bias and activation fuse into it.

Lowering a rank-3 MatMul (``x[N, S, H] @ w``, as every transformer exports its dense
layers) gives ``Reshape(MatMul(Reshape(x, [N*S, H]), w), [N, S, M])``, and the bias Add,
GELU or scaling after it reads that outer Reshape: in the IR, a view of the MatMul's
buffer. Two things then went wrong on the CPU backend (BERT-mini, docs/performance.md):

- the fusion planner folds element-wise work into a MatMul's store only when it reads the
  MatMul's own buffer, so no bias was ever fused into a transformer's dense layer;
- the IR optimizer writes an element-wise result in place only into a buffer (not a view),
  so the bias Add took the broadcast bias's buffer, which then had to be materialized
  (a 128 x 1024 copy of a 1024-float bias before each FFN layer's Add).

This rewrite, run after lowering, turns ``op(Reshape(a), Broadcast(c) | Splat | Reshape(b) | d)``
into ``Reshape(op(a, Broadcast(c') | Splat | b | Reshape(d)))`` for an element-wise ``op``:
element-wise work commutes with a reshape applied to all its operands alike. A broadcast
operand moves only where its pattern survives the reshape (a bias over the last dimension of
``[8, 128, 1024]`` is one over the last dimension of ``[1024, 1024]``); ``c'`` is ``c``
reshaped to match. Any other full-size operand ``d`` (a transformer's residual: the layer's
input) is read through a reshape of its own, a view, so the residual Add after the output
projection and the second dense layer fuses into their MatMul too (``MatMul+Add+Add``: BERT-mini
lost its eight residual kernels). Nodes are visited
in topological order, so a chain (bias, then the five nodes of GELU) sinks the reshape to
its end, where a non-element-wise reader (Transpose, ReduceSum, the next MatMul) takes the
view as before. Reshapes are views: the rewrite never copies data.
"""

from __future__ import annotations

from collections.abc import Sequence

from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Node

KEPT_ELEMENTWISE = frozenset({"Gelu"})
"""High-level nodes this backend keeps that are element-wise too (``CpuBackend.should_lower``)."""


def _groups(out: Sequence[int], target: Sequence[int]) -> list[tuple[range, range]] | None:
    """``out`` and ``target`` (shapes of one element count) cut into the fewest runs of
    dimensions with equal products, as pairs of index ranges: a row-major reshape maps
    each run of ``out`` onto its partner in ``target`` and nothing else."""
    groups: list[tuple[range, range]] = []
    i = j = 0
    while i < len(out) or j < len(target):
        i0, j0 = i, j
        size_out = size_target = 1
        if i < len(out):
            size_out, i = out[i], i + 1
        if j < len(target):
            size_target, j = target[j], j + 1
        while size_out != size_target:
            if size_out < size_target and i < len(out):
                size_out, i = size_out * out[i], i + 1
            elif size_target < size_out and j < len(target):
                size_target, j = size_target * target[j], j + 1
            else:
                return None
        groups.append((range(i0, i), range(j0, j)))
    return groups


def _broadcast_source_shape(
    source: Sequence[int], out: Sequence[int], target: Sequence[int]
) -> tuple[int, ...] | None:
    """The shape a Broadcast source of shape ``source`` (to ``out``) takes when the
    broadcast's result is reshaped to ``target``: within each run of dimensions the reshape
    maps together (``_groups``) the source must be all 1s (then 1s in ``target``) or equal
    to ``out`` (then ``target``'s run); None otherwise (the bias of ``[N, S, H]`` reshaped to
    ``[N*S, H]`` is ``[1, H]``; a per-image value ``[N, 1, 1]`` has no such shape)."""
    if len(source) > len(out):
        return None
    padded = (1,) * (len(out) - len(source)) + tuple(source)
    groups = _groups(out, target)
    if groups is None:
        return None
    shape = [1] * len(target)
    for out_dims, target_dims in groups:
        if all(padded[d] == out[d] for d in out_dims):
            for d in target_dims:
                shape[d] = target[d]
        elif any(padded[d] != 1 for d in out_dims):
            return None
    return tuple(shape)


def _unreshaped_operand(
    b: Builder, operand: Node, out: Sequence[int], target: tuple[int, ...]
) -> Node | None:
    """``operand`` (of shape ``out``) as an operand of shape ``target``, or None."""
    if operand.kind == "Reshape" and operand.inputs[0].type.shape == target:
        return operand.inputs[0]
    if operand.kind == "Splat":
        return b.Splat(shape=target, value=operand.value, elem=operand.elem)
    if operand.kind == "Broadcast":
        source = operand.inputs[0]
        shape = _broadcast_source_shape(source.type.shape, out, target)
        if shape is None:
            return None
        if shape != source.type.shape:
            source = b.Reshape(source, shape=shape)
        return b.Broadcast(source, shape=target)
    if operand.type.shape == tuple(out):
        return b.Reshape(operand, shape=target)
    return None


def sink_reshapes(fn: Function) -> bool:
    """``op(Reshape(a), Broadcast(c) | Splat | Reshape(b) | d)`` -> ``Reshape(op(a, ...))`` for
    element-wise ``op`` whose other operands survive the reshape (see the module docstring);
    returns whether anything changed."""
    changed = False
    for n in fn.topological_order():
        if not (n.spec.elementwise or n.kind in KEPT_ELEMENTWISE) or n.kind == "Save" or not n.inputs:
            continue
        reshapes = [i for i in n.inputs if i.kind == "Reshape"]
        if not reshapes:
            continue
        target = reshapes[0].inputs[0].type.shape
        out = n.type.shape
        if target == out:
            continue
        b = Builder(fn, prefix=f"{n.name}/", predicate=n.predicate)
        operands = [_unreshaped_operand(b, i, out, target) for i in n.inputs]
        if any(o is None for o in operands):
            continue  # the few nodes made for the other operands are dead: dce drops them
        inner = b.create(n.kind, *operands, name=n.name, **n.attrs)
        outer = b.Reshape(inner, shape=out, name=f"{n.name}/reshape")
        fn.replace_all_uses(n, outer)
        fn.erase(n)
        changed = True
    return changed
