"""Element kinds in LLVM: the type each kind is stored in and computed in, the conversions
between the two, and the families of kinds the emitters declare (``@emits(..., kinds=)``).

Every kernel reads and writes elements through these, so a kind's representation is
decided here once (bfloat16 is an i16 widened to float, the narrow kinds are bytes only
ever moved).
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import NARROW_KINDS, ElemKind
from glow_cpu.loops import F32, F64, I8, I16, I32, I64, i32

_STORAGE = {
    ElemKind.float32: F32,
    ElemKind.float16: ir.HalfType(),
    ElemKind.bfloat16: I16,
    ElemKind.float64: F64,
    ElemKind.int8: I8,
    ElemKind.int16: I16,
    ElemKind.int32: I32,
    ElemKind.int64: I64,
    ElemKind.uint8: I8,
    ElemKind.uint16: I16,
    ElemKind.uint32: I32,
    ElemKind.uint64: I64,
    ElemKind.bool: I8,
    # Narrow kinds are one byte each and only ever moved (BitCast from/to uint8, Copy).
    **dict.fromkeys(NARROW_KINDS, I8),
}

# The element kinds each family of kernels handles (declared support is read from these).
STORED_KINDS = frozenset(_STORAGE)
"""Kinds moved as raw storage (copies, views, gathers, selects): every kind."""
FLOATS = frozenset({ElemKind.float32, ElemKind.float16, ElemKind.bfloat16})
"""Float kinds computed in float32 (the half kinds are widened on load, rounded on store)."""
DOUBLE = frozenset({ElemKind.float64})
"""float64, computed in double: never narrowed, its math functions are libm's double ones."""
ALL_FLOATS = FLOATS | DOUBLE
SIGNED = frozenset({ElemKind.int8, ElemKind.int16, ElemKind.int32, ElemKind.int64})
UNSIGNED = frozenset({ElemKind.uint8, ElemKind.uint16, ElemKind.uint32, ElemKind.uint64})
"""Stored like the signed kinds of their width; they differ where order or division matters."""
NUMERIC_KINDS = ALL_FLOATS | SIGNED | UNSIGNED
"""Kinds every arithmetic family handles (element-wise, reductions, scans, ArgMax, TopK);
the float-only operations (Pow, the math functions, AvgPool) take ALL_FLOATS."""


def storage_type(elem: ElemKind) -> ir.Type:
    """The LLVM type one element occupies in memory."""
    return _STORAGE[elem]


def compute_type(elem: ElemKind) -> ir.Type:
    """The LLVM type arithmetic runs in: float32 for the narrow floats, else the storage type."""
    return F32 if elem in FLOATS else _STORAGE[elem]


def float_suffix(ty: ir.Type) -> str:
    """The overload suffix of a float intrinsic for ``ty``: f32, f64, v16f32, v8f64..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{float_suffix(ty.element)}"
    return "f64" if isinstance(ty, ir.DoubleType) else "f32"


def to_compute(b: ir.IRBuilder, raw: ir.Value, elem: ElemKind) -> ir.Value:
    """A loaded element widened to its compute type (half and bfloat16 become float)."""
    if elem is ElemKind.float16:
        return b.fpext(raw, F32)
    if elem is ElemKind.bfloat16:
        return b.bitcast(b.shl(b.zext(raw, I32), i32(16)), F32)
    return raw


def to_storage(b: ir.IRBuilder, value: ir.Value, elem: ElemKind) -> ir.Value:
    """A compute value narrowed to storage (bfloat16 rounds to nearest even, NaN stays NaN)."""
    if elem is ElemKind.float16:
        return b.fptrunc(value, ir.HalfType())
    if elem is ElemKind.bfloat16:
        bits = b.bitcast(value, I32)
        odd = b.and_(b.lshr(bits, i32(16)), i32(1))
        rounded = b.lshr(b.add(b.add(bits, i32(0x7FFF)), odd), i32(16))
        is_nan = b.fcmp_unordered("uno", value, value)
        return b.trunc(b.select(is_nan, i32(0x7FC0), rounded), I16)
    return value
