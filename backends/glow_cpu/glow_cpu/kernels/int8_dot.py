"""How the int8 kernels multiply: int16 *pairs* or byte *quads*, and the quad product
``dot4`` as one VNNI instruction or as plain LLVM IR.

x86 has two exact int8 multiply-adds. ``vpmaddwd`` (every AVX2 CPU) multiplies int16 pairs
and adds each pair into an int32 lane; ``vpdpbusd`` (AVX-512 VNNI, AVX-VNNI) multiplies 4
adjacent *unsigned* bytes by 4 *signed* bytes and adds the 4 products into the int32 lane,
twice the products per instruction and no widening of the input. Which one a program uses
is a ``Choice`` made once per compile from ``CpuOptions.int8_dot`` and the target
(``registers.vnni_bits``): ``auto`` takes quads where the target has ``vpdpbusd`` and pairs
elsewhere (where quads would be emulated: slower than ``vpmaddwd``), ``pairs`` and
``quads`` force a layout. Forced quads on a target without VNNI run ``dot4``'s generic IR,
which computes what the instruction computes by construction (``vpdpbusd`` wraps, it does not
saturate; the kernels' sums never wrap, ``int8_shape.fits_int32``): that is how the quad
layout is tested on a machine that cannot execute the instruction.

The backend (and the bundle writer) set the choice around building one program, as
``winograd.enabled`` does; it is part of the compile cache's key through the option and the
target.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from llvmlite import ir

from glow_cpu.emit import intrinsic
from glow_cpu.loops import I8, I32, set_within

Int8Dot = Literal["auto", "pairs", "quads"]
"""``CpuOptions.int8_dot``: which multiply-add the int8 convolution and dense layers use."""


@dataclass(frozen=True)
class Choice:
    """The int8 kernels' multiply for one program: ``quads`` (the byte-quad layout, for
    layers with int8 weights) and ``vnni_bits``, the widest ``vpdpbusd`` the target has
    (0: none, ``dot4`` emits generic IR)."""

    quads: bool = False
    vnni_bits: int = 0


PAIRS = Choice()
"""The pairs, no VNNI: what a program built outside any ``chosen`` block gets."""
_CHOICE: ContextVar[Choice | None] = ContextVar("int8_dot", default=None)


def choose(option: Int8Dot, vnni_bits: int) -> Choice:
    """The choice ``option`` makes on a target whose widest ``vpdpbusd`` is ``vnni_bits``."""
    quads = option == "quads" or (option == "auto" and vnni_bits > 0)
    return Choice(quads=quads, vnni_bits=vnni_bits)


def chosen(choice: Choice) -> AbstractContextManager[None]:
    """Within the block, the int8 kernels emitted use ``choice``."""
    return set_within(_CHOICE, choice)


def current() -> Choice:
    """The choice in force (``PAIRS`` outside any ``chosen`` block)."""
    return _CHOICE.get() or PAIRS


def dot4(b: ir.IRBuilder, acc: ir.Value, u8quads: ir.Value, s8quads: ir.Value) -> ir.Value:
    """``acc`` plus, in each int32 lane, the 4 products of the lane's bytes of ``u8quads``
    (unsigned) and ``s8quads`` (signed): ``vpdpbusd``'s meaning. All three are vectors of
    int32 of one length (a multiple of 8 for the instruction).

    With VNNI it is the instruction (one 512-bit form per 16 lanes, or one 256-bit form per
    8); otherwise the same arithmetic written out: bytes widened to int32 (zero- and
    sign-extended), multiplied, each lane's 4 products summed and added to ``acc``."""
    lanes = acc.type.count
    bits = current().vnni_bits
    if bits and lanes % (bits // 32) == 0:
        return _vnni(b, acc, u8quads, s8quads, bits // 32)
    wide = ir.VectorType(I32, 4 * lanes)
    as_bytes = ir.VectorType(I8, 4 * lanes)
    u = b.zext(b.bitcast(u8quads, as_bytes), wide)
    s = b.sext(b.bitcast(s8quads, as_bytes), wide)
    products = b.mul(u, s)
    terms = [b.shuffle_vector(products, products, _lanes(i, 4, lanes)) for i in range(4)]
    return b.add(acc, b.add(b.add(terms[0], terms[1]), b.add(terms[2], terms[3])))


def _vnni(b: ir.IRBuilder, acc: ir.Value, u: ir.Value, s: ir.Value, width: int) -> ir.Value:
    """``vpdpbusd`` on ``width``-lane slices of the operands (LLVM's x86 intrinsic; the
    256-bit one is VEX-encoded where the target has AVX-VNNI and EVEX with AVX512VL)."""
    lanes = acc.type.count
    part = ir.VectorType(I32, width)
    fn = intrinsic(b.module, f"llvm.x86.avx512.vpdpbusd.{width * 32}", part, [part, part, part])
    if lanes == width:
        return b.call(fn, [acc, u, s])
    results = []
    for start in range(0, lanes, width):
        pick = _lanes(start, 1, width)
        args = [b.shuffle_vector(v, v, pick) for v in (acc, u, s)]
        results.append(b.call(fn, args))
    while len(results) > 1:  # concatenate pairwise: a shuffle joins two equal halves
        joined = []
        for a, c in zip(results[::2], results[1::2], strict=True):
            n = a.type.count
            joined.append(b.shuffle_vector(a, c, _lanes(0, 1, 2 * n)))
        results = joined
    return results[0]


def _lanes(start: int, step: int, count: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, count), [start + step * i for i in range(count)])
