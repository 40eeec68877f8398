"""Bit-level operations: Bitwise (and, or, xor) and BitCast.

Neither has an arithmetic lowering: a bitwise op would need one step per bit, and a
reinterpretation of bits is not a value conversion at all. BitCast is a view (like
Reshape): IRGen gives it the operand's buffer, so backends need no kernel for it. It is the
one primitive declared for the narrow storage kinds (float8, int4...): conversions read
them as uint8 bytes.
"""

from __future__ import annotations

import numpy as np

from glow_core.narrow import finite_codes
from glow_core.spec import Attr, In, ex, expect, primitive
from glow_core.types import ALL_KINDS, INT_KINDS, ElemKind

_OPS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@primitive
class Bitwise:
    """Element-wise bitwise ``op`` (and, or, xor) of two integer or bool tensors; not is xor with -1."""

    lhs = In()
    rhs = In()
    op = Attr(str, "and")
    core = True
    elementwise = True
    inplace = ("lhs", "rhs")
    kinds = INT_KINDS | {ElemKind.bool}
    examples = (
        ex("i32[4,5]", "i32[4,5]", op="and"),
        ex("i64[7]", "i64[7]", op="or"),
        ex("i8[2,3]", "i8[2,3]", op="xor"),
        ex("bool[6]", "bool[6]", op="xor"),
    )

    def type(lhs, rhs, op):
        expect(op in _OPS, f"op {op!r} is not one of {sorted(_OPS)}", lhs)
        expect(lhs == rhs, "operands must have the same type", lhs, rhs)
        expect(lhs.elem in INT_KINDS or lhs.elem is ElemKind.bool, "operands must be integers or bool", lhs)
        return lhs

    def reference(lhs, rhs, op):
        return _OPS[op](lhs, rhs)


@primitive
class BitCast:
    """The same bytes read as element kind ``elem`` of the same width (a view, never a copy)."""

    input = In()
    elem = Attr(str)
    view = True
    kinds = ALL_KINDS
    examples = (ex("f32[4,5]", elem="int32"), ex("i32[7]", elem="float32"), ex("i8[2,3]", elem="int8"))

    def type(input, elem):
        target = ElemKind.parse(elem)
        expect(target.itemsize == input.elem.itemsize, f"{elem} is not as wide as the input", input)
        return input.with_elem(target)

    def sample(rng, input, elem):
        # Bit patterns that are finite numbers in either reading (small exponents only).
        raw = rng.integers(0x3C000000, 0x42000000, input.shape) if input.elem.itemsize == 4 else None
        if raw is not None:
            return [raw.astype(np.uint32).view(input.dtype).astype(input.dtype)]
        narrow = next((k for k in (input.elem, ElemKind.parse(elem)) if k.is_narrow), None)
        if narrow is not None:  # valid codes of the narrow kind, none of them NaN
            return [rng.choice(finite_codes(narrow), input.shape).astype(np.uint8).view(input.dtype)]
        return [rng.integers(-100, 100, input.shape).astype(input.dtype)]

    def reference(input, elem):
        return input.view(ElemKind.parse(elem).dtype)
