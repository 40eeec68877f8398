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


def _reduced(input: Type, axes: tuple[int, ...]) -> Type:
    expect(len(axes) > 0, "reduce needs at least one axis", input)
    expect(all(0 <= a < input.rank for a in axes), f"axes {axes} out of range", input)
    expect(len(set(axes)) == len(axes), f"repeated axes {axes}", input)
    return input.with_shape(tuple(1 if i in axes else d for i, d in enumerate(input.shape)))
