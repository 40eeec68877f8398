"""Prefix reductions along one axis: CumReduce (ONNX CumSum and CumProd).

Not a lowering: a running sum could be a MatMul with a triangular matrix for floats, but
that costs O(n^2) and is wrong for integers, and a running product has no such form.
ReduceProd lowers to the last element of a CumReduce product.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import DifferentiationError
from glow_core.primitives.kinds import NUMERIC_KINDS, wide
from glow_core.spec import Attr, In, ex, expect, normalize_axis, primitive

_OPS = {"sum": (np.cumsum, 0), "prod": (np.cumprod, 1)}


@primitive
class CumReduce:
    """Running ``op`` (sum or prod) along ``axis``; ``exclusive`` shifts in the identity, ``reverse`` runs backwards."""

    input = In()
    axis = Attr(int, 0)
    op = Attr(str, "sum")
    exclusive = Attr(bool, False)
    reverse = Attr(bool, False)
    core = True
    kinds = NUMERIC_KINDS
    examples = (
        ex("f32[4,5]", axis=1),
        ex("f32[6]", exclusive=True, reverse=True),
        ex("i64[3,4]", axis=0, op="prod"),
        ex("i32[2,3,4]", axis=-1, reverse=True),
    )

    def type(input, axis, op, exclusive, reverse):
        expect(op in _OPS, f"op {op!r} is not one of {sorted(_OPS)}", input)
        expect(input.rank >= 1, "cumulative op needs at least one dimension", input)
        normalize_axis(axis, input.rank, input)
        return input

    def reference(input, axis, op, exclusive, reverse):
        axis = axis % input.ndim
        fn, identity = _OPS[op]
        x = wide(input)
        if reverse:
            x = np.flip(x, axis)
        if exclusive:
            pad = [(0, 0)] * x.ndim
            pad[axis] = (1, 0)
            x = np.pad(x, pad, constant_values=identity)
            x = np.delete(x, -1, axis=axis)
        out = fn(x, axis=axis, dtype=x.dtype)
        return np.flip(out, axis) if reverse else out

    def grad(b, node, out_grad):
        # Element j of a running sum reaches every later (earlier, when reversed) result,
        # so its gradient is the running sum of the gradient run the other way.
        if node.op != "sum":
            raise DifferentiationError(
                f"node {node.name!r} of kind CumReduce has no gradient rule for op={node.op!r} "
                f"(only running sums differentiate): keep it off the path from the parameters to the loss"
            )
        flipped = {"axis": node.axis, "op": "sum", "exclusive": node.exclusive, "reverse": not node.reverse}
        return (b.CumReduce(out_grad, **flipped),)
