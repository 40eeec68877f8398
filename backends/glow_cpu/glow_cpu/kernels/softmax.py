"""Softmax over the last axis, float32, as one kernel.

Lowered, a softmax is six kernels: a ReduceMax, a materialized Broadcast of the row maxima,
Sub+Exp, a ReduceSum, a second Broadcast and a Div, each a pass over the whole tensor (the
attention scores of a transformer: BERT-mini's four softmaxes took 0.39 ms of its 10.5 at
batch 1, onnxruntime's one kernel each 0.17). Here each row is read three times while it
is in L1: its maximum, then ``exp(x - max)`` stored and summed, then the stored values
divided by the sum.

The arithmetic is the lowered form's, step for step, so the outputs are bit-equal to it:
the same exponential (``mathfn.exp``), the sum of the row's 16-float vectors in two
``<8 x double>`` accumulators folded pairwise (``reduce._reduce_runs``), rounded to float
once, and a division (not a multiplication by the reciprocal).
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_core.spec import normalize_axis
from glow_core.types import ElemKind
from glow_cpu.emit import F32X16, VECTOR, Kernel, emits
from glow_cpu.kernels import mathfn
from glow_cpu.kernels.layernorm import _add_widened
from glow_cpu.kernels.ops import apply
from glow_cpu.kernels.reduce import F64X8, _horizontal
from glow_cpu.kernels.simd import splat, vector_load, vector_store
from glow_cpu.loops import F32, I1, carried_loop, float_at, for_range, i64


def fused(shape: tuple[int, ...], axis: int) -> bool:
    """Whether a float32 Softmax over ``axis`` of ``shape`` runs as this kernel: over the
    last axis (each row contiguous), with something to reduce."""
    return normalize_axis(axis, len(shape)) == len(shape) - 1 and math.prod(shape) > 0


@emits("Softmax", kinds={ElemKind.float32})
def emit_softmax(k: Kernel) -> None:
    dest, (x,) = k.dest, k.sources
    shape = x.type.shape
    assert fused(shape, k.attrs["axis"]), f"Softmax over axis {k.attrs['axis']} of {shape} is lowered"
    cols = shape[-1]
    rows = math.prod(shape) // cols
    full, rest = divmod(cols, VECTOR)
    b = k.b
    lowest = ir.Constant(F32X16, [ir.Constant(F32, -math.inf)] * VECTOR)
    zero = ir.Constant(F32X16, None)
    kept = ir.Constant(ir.VectorType(I1, VECTOR), [int(i < rest) for i in range(VECTOR)])

    def max_of(acc: ir.Value, value: ir.Value) -> ir.Value:
        return apply(b, "Max", ElemKind.float32, [acc, value])

    start, stop = k.split(rows)
    with for_range(b, stop, start, name="row") as r:
        row = float_at(b, x.ptr, b.mul(r, i64(cols)))
        out = float_at(b, dest.ptr, b.mul(r, i64(cols)))

        def load(v: ir.Value, lanes: int, base: ir.Value = row) -> ir.Value:
            return vector_load(k, float_at(b, base, b.mul(v, i64(VECTOR))), lanes)

        def larger(v: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            return [max_of(accs[0], load(v, VECTOR))]

        (peak,) = carried_loop(b, i64(0), i64(full), [lowest], larger)
        if rest:
            peak = max_of(peak, b.select(kept, load(i64(full), rest), lowest))
        peak_v = splat(b, _horizontal(b, peak, max_of))

        def exponentials(v: ir.Value, lanes: int, accs: list[ir.Value]) -> list[ir.Value]:
            e = mathfn.exp(b, b.fsub(load(v, lanes), peak_v))
            vector_store(k, float_at(b, out, b.mul(v, i64(VECTOR))), e, lanes)
            return _add_widened(b, accs, e if lanes == VECTOR else b.select(kept, e, zero))

        sums = [ir.Constant(F64X8, None)] * 2
        sums = carried_loop(b, i64(0), i64(full), sums, lambda v, accs: exponentials(v, VECTOR, accs))
        if rest:
            sums = exponentials(i64(full), rest, sums)
        total = splat(b, b.fptrunc(_horizontal(b, b.fadd(sums[0], sums[1]), b.fadd), F32))

        def divide(v: ir.Value, lanes: int) -> None:
            at = float_at(b, out, b.mul(v, i64(VECTOR)))
            vector_store(k, at, b.fdiv(load(v, lanes, out), total), lanes)

        with for_range(b, i64(full), name="v") as v:
            divide(v, VECTOR)
        if rest:
            divide(i64(full), rest)
