"""LayerNorm over the trailing dimensions, float32, as one kernel.

Lowered, a layer norm is nine kernels (two ReduceSums, two materialized Broadcasts of the
row statistics and five element-wise passes), each a pass over the whole tensor. Here each
row is read three times while it is in L1: its sum, the sum of squared deviations from
the mean (two passes, as the lowering computes it: no cancellation), then the normalized,
scaled and shifted values. Sums accumulate in double, as ``reduce.py``'s do.
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_core.spec import normalize_axis
from glow_core.types import ElemKind
from glow_cpu.emit import F32X16, VECTOR, Kernel, emits
from glow_cpu.kernels.reduce import F64X8, _horizontal
from glow_cpu.kernels.simd import fma, lane_mask, splat, vector_load, vector_store
from glow_cpu.loops import F32, F64, carried_loop, float_at, for_range, i64, shuffle_mask

_HALVES = [shuffle_mask(list(range(h * 8, h * 8 + 8))) for h in range(2)]


def _add_widened(b: ir.IRBuilder, accs: list[ir.Value], value: ir.Value) -> list[ir.Value]:
    """The two ``<8 x double>`` accumulators plus the 16 floats of ``value``."""
    undef = ir.Constant(F32X16, ir.Undefined)
    return [
        b.fadd(acc, b.fpext(b.shuffle_vector(value, undef, half), F64X8))
        for acc, half in zip(accs, _HALVES, strict=True)
    ]


def _row_sum(k: Kernel, row: ir.Value, cols: int, term) -> ir.Value:
    """sum over the row of ``term(x, lanes)`` (16 floats of the row, ``lanes`` of them
    real), in double."""
    b = k.b
    full, rest = divmod(cols, VECTOR)
    init = [ir.Constant(F64X8, None)] * 2

    def step(v: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        x = vector_load(k, float_at(b, row, b.mul(v, i64(VECTOR))))
        return _add_widened(b, accs, term(x, VECTOR))

    accs = carried_loop(b, i64(0), i64(full), init, step)
    if rest:
        accs = _add_widened(b, accs, term(vector_load(k, float_at(b, row, full * VECTOR), rest), rest))
    return _horizontal(b, b.fadd(accs[0], accs[1]), b.fadd)


@emits("LayerNorm", kinds={ElemKind.float32})
def emit_layer_norm(k: Kernel) -> None:
    dest, (x, scale, bias) = k.dest, k.sources
    shape = x.type.shape
    axis = normalize_axis(k.attrs["axis"], len(shape))
    cols, rows = math.prod(shape[axis:]), math.prod(shape[:axis])
    if cols == 0 or rows == 0:
        return
    b = k.b
    full, rest = divmod(cols, VECTOR)
    whole_rows = scale.type.size == cols and bias.type.size == cols  # else scale/bias repeat
    start, stop = k.split(rows)
    with for_range(b, stop, start, name="row") as r:
        row = float_at(b, x.ptr, b.mul(r, i64(cols)))
        out = float_at(b, dest.ptr, b.mul(r, i64(cols)))
        mean = b.fptrunc(b.fdiv(_row_sum(k, row, cols, lambda v, lanes: v), ir.Constant(F64, cols)), F32)
        mean_v = splat(b, mean)

        def squared(v: ir.Value, lanes: int) -> ir.Value:
            d = b.fsub(v, mean_v)
            if lanes < VECTOR:  # the masked lanes loaded 0, which is not the mean
                d = b.select(lane_mask(lanes), d, ir.Constant(F32X16, None))
            return b.fmul(d, d)

        variance = b.fdiv(_row_sum(k, row, cols, squared), ir.Constant(F64, cols))
        epsilon = ir.Constant(F64, k.attrs["epsilon"])
        std = b.call(k.intrinsic("llvm.sqrt.f64", F64, [F64]), [b.fadd(variance, epsilon)])
        rstd = b.fptrunc(b.fdiv(ir.Constant(F64, 1.0), std), F32)
        if whole_rows:
            rstd_v = splat(b, rstd)

            def normalize(offset: ir.Value, lanes: int) -> None:
                v = vector_load(k, float_at(b, row, offset), lanes)
                gamma = vector_load(k, float_at(b, scale.ptr, offset), lanes)
                beta = vector_load(k, float_at(b, bias.ptr, offset), lanes)
                y = fma(k, b.fmul(b.fsub(v, mean_v), rstd_v), gamma, beta)
                vector_store(k, float_at(b, out, offset), y, lanes)

            with for_range(b, i64(full), name="v") as v:
                normalize(b.mul(v, i64(VECTOR)), VECTOR)
            if rest:
                normalize(i64(full * VECTOR), rest)
        else:
            with for_range(b, i64(cols), name="c") as c:
                value = b.load(float_at(b, row, c), typ=F32)
                gamma = b.load(float_at(b, scale.ptr, b.urem(c, i64(scale.type.size))), typ=F32)
                beta = b.load(float_at(b, bias.ptr, b.urem(c, i64(bias.type.size))), typ=F32)
                y = b.fadd(b.fmul(b.fmul(b.fsub(value, mean), rstd), gamma), beta)
                b.store(y, float_at(b, out, c))
