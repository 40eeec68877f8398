"""Element-wise primitives: one counted loop over contiguous memory per instruction.

Each kernel is a flat scalar loop ``dest[i] = op(a[i], b[i])``; LLVM's loop vectorizer
turns it into 512-bit code (the math functions are branch-free for that reason). The loop
reads element ``i`` of every source before writing element ``i``, so a destination that is
the same buffer as a source (in-place after the IR optimizer) is correct. float64 computes
in double (its math functions are libm's, see ``mathfn``); the other floats in float32.
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.chain_ops import Op
from glow_cpu.emit import Kernel, emits
from glow_cpu.kernels.chain import chain_loop
from glow_cpu.kernels.ops import FLOAT_ONLY_KINDS, NUMERIC_BINARY_KINDS, op_kind
from glow_cpu.kinds import ALL_FLOATS, NUMERIC_KINDS, SIGNED, STORED_KINDS, UNSIGNED, storage_type
from glow_cpu.loops import I8, for_range

_GRAIN = 64  # threads split element loops in multiples of 4 cache lines of floats


@emits(*NUMERIC_BINARY_KINDS, kinds=NUMERIC_KINDS)
@emits(*FLOAT_ONLY_KINDS, kinds=ALL_FLOATS)
def emit_elementwise(k: Kernel) -> None:
    """The instruction, and any epilogue fused after it, as one loop over the destination."""
    sources = range(1, len(k.types))
    op = Op(op_kind(k.instr.kind, k.attrs), k.instr.name, tuple(k.access(i) for i in sources))
    chain_loop(k, k.dest, [op, *k.epilogue])


_FLOAT_PREDICATES = {"eq": "==", "lt": "<", "le": "<="}


@emits("Compare", kinds=STORED_KINDS)  # keyed by the compared kind (Compare.kind_operand)
def emit_compare(k: Kernel) -> None:
    """Ordered comparisons (NaN compares false); bools compare as 0/1 bytes."""
    dest, (lhs, rhs) = k.dest, k.sources
    op = _FLOAT_PREDICATES[k.attrs["predicate"]]
    b = k.b
    start, stop = k.split(dest.type.size, _GRAIN)
    with for_range(b, stop, start) as i:
        x, y = lhs.load(b, i), rhs.load(b, i)
        if lhs.elem.is_float:
            result = b.fcmp_ordered(op, x, y)
        elif lhs.elem is ElemKind.bool or lhs.elem in UNSIGNED:
            result = b.icmp_unsigned(op, x, y)
        else:
            result = b.icmp_signed(op, x, y)
        dest.store(b, i, b.zext(result, I8))


_BITWISE = {"and": "and_", "or": "or_", "xor": "xor"}


@emits("Bitwise", kinds=SIGNED | UNSIGNED | {ElemKind.bool})
def emit_bitwise(k: Kernel) -> None:
    dest, (lhs, rhs) = k.dest, k.sources
    b = k.b
    op = getattr(b, _BITWISE[k.attrs["op"]])
    start, stop = k.split(dest.type.size, _GRAIN)
    with for_range(b, stop, start) as i:
        dest.store(b, i, op(lhs.load(b, i), rhs.load(b, i)))


@emits("Select", kinds=STORED_KINDS)
def emit_select(k: Kernel) -> None:
    dest, (cond, lhs, rhs) = k.dest, k.sources
    b = k.b
    raw = storage_type(dest.elem)
    start, stop = k.split(dest.type.size, _GRAIN)
    with for_range(b, stop, start) as i:
        flag = b.icmp_unsigned("!=", cond.load(b, i), ir.Constant(I8, 0))
        x = b.load(lhs.at(b, i), typ=raw)
        y = b.load(rhs.at(b, i), typ=raw)
        b.store(b.select(flag, x, y), dest.at(b, i))
