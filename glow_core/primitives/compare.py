"""Element comparisons and selection: Compare (-> bool) and Select.

These two are the whole of glow's boolean algebra: ONNX Equal, Less, Greater, Not, And, Or,
Xor, IsNaN, Where, Sign, Mod's sign fix-up and masking in attention all lower to them, so a
backend needs two kernels, not ten.
"""

from __future__ import annotations

import numpy as np

from glow_core.primitives.kinds import VALUE_KINDS
from glow_core.spec import Attr, In, ex, expect, primitive, random_tensor
from glow_core.types import ElemKind, Type

_PREDICATES = {"eq": np.equal, "lt": np.less, "le": np.less_equal}


@primitive
class Compare:
    """Element-wise ``lhs <predicate> rhs`` as bool; ``predicate`` is eq, lt or le (NaN compares false)."""

    lhs = In()
    rhs = In()
    predicate = Attr(str, "eq", "eq, lt or le; gt/ge swap the operands, ne negates eq")
    core = True
    elementwise = True
    inplace = ("lhs", "rhs")  # only taken when the result type matches (bool operands)
    kinds = VALUE_KINDS
    kind_operand = "lhs"  # the result is always bool: kernels are chosen by what is compared
    examples = (
        ex("f32[4,5]", "f32[4,5]", predicate="lt"),
        ex("i64[7]", "i64[7]", predicate="eq"),
        ex("i32[2,3]", "i32[2,3]", predicate="le"),
        ex("bool[6]", "bool[6]", predicate="eq"),
        ex("f32[]", "f32[]", predicate="le"),
    )

    def type(lhs, rhs, predicate):
        expect(predicate in _PREDICATES, f"predicate {predicate!r} is not one of {sorted(_PREDICATES)}")
        expect(lhs == rhs, "operands must have the same type", lhs, rhs)
        return Type(lhs.shape, ElemKind.bool)

    def sample(rng, lhs, rhs, predicate):
        # Half the right operand copies the left one, so "equal" is exercised too.
        left, right = random_tensor(rng, lhs), random_tensor(rng, rhs)
        same = rng.random(lhs.shape) < 0.5
        return [left, np.where(same, left, right).astype(rhs.dtype)]

    def reference(lhs, rhs, predicate):
        return _PREDICATES[predicate](lhs, rhs)


@primitive
class Select:
    """Element-wise ``cond ? lhs : rhs`` (ONNX Where with operands already broadcast)."""

    cond = In()
    lhs = In()
    rhs = In()
    core = True
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = VALUE_KINDS
    examples = (
        ex("bool[4,5]", "f32[4,5]", "f32[4,5]"),
        ex("bool[7]", "i64[7]", "i64[7]"),
        ex("bool[]", "f32[]", "f32[]"),
    )

    def type(cond, lhs, rhs):
        expect(cond.elem is ElemKind.bool, "condition must be bool", cond)
        expect(lhs == rhs, "operands must have the same type", lhs, rhs)
        expect(cond.shape == lhs.shape, "condition and operands differ in shape", cond, lhs)
        return lhs

    def reference(cond, lhs, rhs):
        return np.where(cond, lhs, rhs)

    def grad(b, node, out_grad):
        zero = b.splat(0.0, out_grad)  # the condition is bool: no gradient flows to it
        return None, b.Select(node.cond, out_grad, zero), b.Select(node.cond, zero, out_grad)
