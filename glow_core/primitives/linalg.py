"""Linear algebra and reductions: MatMul, BatchMatMul, ReduceSum, ReduceMax."""

from __future__ import annotations

import numpy as np

from glow_core.primitives.kinds import NUMERIC_KINDS, wide
from glow_core.spec import Attr, In, ex, expect, primitive
from glow_core.types import Type

# ---- linear algebra -------------------------------------------------------------------


@primitive
class MatMul:
    """[m,k] x [k,n] -> [m,n]."""

    lhs = In()
    rhs = In()
    core = True
    examples = (ex("f32[4,3]", "f32[3,5]"), ex("f32[1,64]", "f32[64,33]"), ex("f32[17,1]", "f32[1,9]"))

    def type(lhs, rhs):
        expect(lhs.rank == rhs.rank == 2, "operands must be 2-D", lhs, rhs)
        expect(lhs.shape[1] == rhs.shape[0], "inner dimensions differ", lhs, rhs)
        expect(lhs.elem == rhs.elem, "element kinds differ", lhs, rhs)
        return lhs.with_shape((lhs.shape[0], rhs.shape[1]))

    def reference(lhs, rhs):
        return wide(lhs) @ wide(rhs)

    def grad(b, node, out_grad):
        # d(L)/d(lhs) = G @ rhs^T, d(L)/d(rhs) = lhs^T @ G.
        flip = (1, 0)
        return (
            b.MatMul(out_grad, b.Transpose(node.rhs, shuffle=flip)),
            b.MatMul(b.Transpose(node.lhs, shuffle=flip), out_grad),
        )


@primitive
class BatchMatMul:
    """[b,m,k] x [b,k,n] -> [b,m,n]: one MatMul per batch entry (attention uses it)."""

    lhs = In()
    rhs = In()
    core = True
    examples = (ex("f32[3,4,5]", "f32[3,5,2]"), ex("f32[1,7,16]", "f32[1,16,7]"))

    def type(lhs, rhs):
        expect(lhs.rank == rhs.rank == 3, "operands must be 3-D", lhs, rhs)
        expect(lhs.shape[0] == rhs.shape[0], "batch dimensions differ", lhs, rhs)
        expect(lhs.shape[2] == rhs.shape[1], "inner dimensions differ", lhs, rhs)
        expect(lhs.elem == rhs.elem, "element kinds differ", lhs, rhs)
        return lhs.with_shape((lhs.shape[0], lhs.shape[1], rhs.shape[2]))

    def reference(lhs, rhs):
        return np.matmul(wide(lhs), wide(rhs))

    def grad(b, node, out_grad):
        flip = (0, 2, 1)  # MatMul's rule per batch entry
        return (
            b.BatchMatMul(out_grad, b.Transpose(node.rhs, shuffle=flip)),
            b.BatchMatMul(b.Transpose(node.lhs, shuffle=flip), out_grad),
        )


@primitive
class ReduceSum:
    """Sum over ``axes``; reduced dimensions are kept with size 1."""

    input = In()
    axes = Attr(tuple)
    core = True
    kinds = NUMERIC_KINDS
    examples = (ex("f32[4,5]", axes=(1,)), ex("f32[2,3,4]", axes=(0, 2)), ex("f32[9]", axes=(0,)))

    def type(input, axes):
        return _reduced(input, axes)

    def reference(input, axes):
        return np.sum(wide(input), axis=axes, keepdims=True)

    def grad(b, node, out_grad):
        # Reduced dims are kept with size 1, so the gradient broadcasts straight back.
        return (b.Broadcast(out_grad, shape=node.input.type.shape),)


@primitive
class ReduceMax:
    """Maximum over ``axes``; reduced dimensions are kept with size 1."""

    input = In()
    axes = Attr(tuple)
    core = True
    kinds = NUMERIC_KINDS
    examples = (ex("f32[4,5]", axes=(1,)), ex("f32[2,3,4]", axes=(0, 2)))

    def type(input, axes):
        reduced = _reduced(input, axes)
        empty = any(input.shape[a] == 0 for a in axes) and reduced.size > 0
        expect(not empty, f"the maximum over the empty axes {axes} has no value", input)
        return reduced

    def reference(input, axes):
        return np.max(input, axis=axes, keepdims=True)

    def grad(b, node, out_grad):
        # The gradient goes to the elements equal to the maximum (every one of them on a
        # tie). Softmax subtracts its row maximum, and there the two paths cancel exactly.
        shape = node.input.type.shape
        winner = b.Compare(node.input, b.Broadcast(node, shape=shape), predicate="eq")
        spread = b.Broadcast(out_grad, shape=shape)
        return (b.Select(winner, spread, b.splat(0.0, spread)),)


def _reduced(input: Type, axes: tuple[int, ...]) -> Type:
    expect(len(axes) > 0, "reduce needs at least one axis", input)
    expect(all(0 <= a < input.rank for a in axes), f"axes {axes} out of range", input)
    expect(len(set(axes)) == len(axes), f"repeated axes {axes}", input)
    return input.with_shape(tuple(1 if i in axes else d for i, d in enumerate(input.shape)))
