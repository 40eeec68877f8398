"""The scalar (or vector) operation of every element-wise primitive, by kind and element kind.

Float operations work on ``float`` and on ``<N x float>`` alike, so the same table serves
the element loops (scalar code LLVM vectorizes) and the GEMM epilogue (explicit vectors).
They work on ``double`` too (float64 computes in double): intrinsic names follow the
operand type, and the polynomial math functions defer to libm for doubles.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import intrinsic
from glow_cpu.kernels import mathfn
from glow_cpu.kinds import UNSIGNED, float_suffix

Scalar = Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]


def _float_intrinsic(name: str) -> Callable[..., ir.Value]:
    """A float intrinsic on float or double scalars or vectors (the name suffix follows the
    argument type, so one table entry serves float32 and float64)."""

    def call(b: ir.IRBuilder, *args: ir.Value) -> ir.Value:
        ty = args[0].type
        fn = intrinsic(b.module, f"{name}.{float_suffix(ty)}", ty, [ty] * len(args))
        return b.call(fn, list(args))

    return call


def _int_intrinsic(name: str) -> Scalar:
    def call(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        fn = intrinsic(b.module, f"{name}.i{x.type.width}", x.type, [x.type, x.type])
        return b.call(fn, [x, y])

    return call


def _int_div(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Truncating division that never traps: x/0 gives 0 and x/-1 wraps like -x."""
    zero, minus_one = ir.Constant(x.type, 0), ir.Constant(x.type, -1)
    special = b.or_(b.icmp_signed("==", y, zero), b.icmp_signed("==", y, minus_one))
    safe = b.select(special, ir.Constant(x.type, 1), y)
    quotient = b.sdiv(x, safe)
    by_minus_one = b.sub(zero, x)
    result = b.select(b.icmp_signed("==", y, minus_one), by_minus_one, quotient)
    return b.select(b.icmp_signed("==", y, zero), zero, result)


def _uint_div(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Unsigned division that never traps: x/0 gives 0."""
    zero = ir.Constant(x.type, 0)
    is_zero = b.icmp_unsigned("==", y, zero)
    quotient = b.udiv(x, b.select(is_zero, ir.Constant(x.type, 1), y))
    return b.select(is_zero, zero, quotient)


# Unsigned integers differ from signed ones only where order or division matters.
_UNSIGNED: dict[str, Scalar] = {
    "Div": _uint_div,
    "Max": _int_intrinsic("llvm.umax"),
    "Min": _int_intrinsic("llvm.umin"),
}

# (float op, integer op or None) per binary primitive.
_BINARY: dict[str, tuple[Scalar, Scalar | None]] = {
    "Add": (lambda b, x, y: b.fadd(x, y), lambda b, x, y: b.add(x, y)),
    "Sub": (lambda b, x, y: b.fsub(x, y), lambda b, x, y: b.sub(x, y)),
    "Mul": (lambda b, x, y: b.fmul(x, y), lambda b, x, y: b.mul(x, y)),
    "Div": (lambda b, x, y: b.fdiv(x, y), _int_div),
    # llvm.maximum/minimum propagate NaN, as numpy.maximum/minimum do.
    "Max": (_float_intrinsic("llvm.maximum"), _int_intrinsic("llvm.smax")),
    "Min": (_float_intrinsic("llvm.minimum"), _int_intrinsic("llvm.smin")),
    "Pow": (_float_intrinsic("llvm.pow"), None),
}

UNARY_OPS: dict[str, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {
    "Exp": mathfn.exp,
    "Log": _float_intrinsic("llvm.log"),
    "Sqrt": _float_intrinsic("llvm.sqrt"),
    "Tanh": mathfn.tanh,
    "Erf": mathfn.erf,
    "Gelu": mathfn.gelu,  # the exact form; op_kind names the tanh one
    "Floor": _float_intrinsic("llvm.floor"),
    # sin, cos and atan become libm calls (sinf, cosf, atanf, or the double ones for
    # float64): rare in models, exact enough. Log and Pow likewise.
    "Sin": _float_intrinsic("llvm.sin"),
    "Cos": _float_intrinsic("llvm.cos"),
    "Atan": _float_intrinsic("llvm.atan"),
}


_ATTRIBUTE_VARIANTS: dict[str, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {
    "Gelu.tanh": mathfn.gelu_tanh,
}
"""Unary operations an attribute selects: keys of ``op_kind``, never instruction kinds."""


def op_kind(kind: str, attrs: dict) -> str:
    """The operation an element-wise instruction applies, as ``apply`` names it: its kind,
    or for a Gelu with ``approximate="tanh"`` the tanh form (a fused chain keeps only the
    names of its operations, so the attribute must be part of the name)."""
    if kind == "Gelu" and attrs.get("approximate", "none") == "tanh":
        return "Gelu.tanh"
    return kind


BINARY_KINDS = frozenset(_BINARY)
UNARY_KINDS = frozenset(UNARY_OPS)
NUMERIC_BINARY_KINDS = frozenset(kind for kind, (_, int_op) in _BINARY.items() if int_op is not None)
"""Binary kinds with an integer form too: emitted for every numeric element kind."""
FLOAT_ONLY_KINDS = (BINARY_KINDS - NUMERIC_BINARY_KINDS) | UNARY_KINDS
"""Kinds with a float form only (Pow and the unary math functions)."""


def binary_op(kind: str, elem: ElemKind) -> Scalar:
    """The scalar operation of binary primitive ``kind`` on compute values of ``elem``."""
    float_op, int_op = _BINARY[kind]
    if elem.is_float:
        return float_op
    if elem in UNSIGNED and kind in _UNSIGNED:
        return _UNSIGNED[kind]
    assert int_op is not None, f"{kind} has no integer form"
    return int_op


def window_max(elem: ElemKind) -> Scalar:
    """The maximum a MaxPool window takes: llvm.maxnum for floats, so NaN never wins (a
    window is NaN only when all its elements are, as the primitive says); the integer max
    otherwise."""
    return _float_intrinsic("llvm.maxnum") if elem.is_float else binary_op("Max", elem)


def apply(b: ir.IRBuilder, kind: str, elem: ElemKind, args: list[ir.Value]) -> ir.Value:
    """Element-wise primitive ``kind`` on compute values (scalars or float vectors)."""
    if kind in UNARY_OPS:
        return UNARY_OPS[kind](b, args[0])
    if kind in _ATTRIBUTE_VARIANTS:
        return _ATTRIBUTE_VARIANTS[kind](b, args[0])
    return binary_op(kind, elem)(b, args[0], args[1])
