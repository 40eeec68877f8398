"""Reductions (ReduceSum, ReduceMax) and pooling (MaxPool, AvgPool, NCHW).

Float sums accumulate in double: the reductions in the models (softmax, layer norm,
global average pooling) are short, and a float64 accumulator keeps the result within an ulp
of the reference whatever the length. A maximum is the element-wise Max of the kind (NaN
wins for floats, unsigned integers compare unsigned), so integer tensors reduce and pool
without a round trip through float.
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import F32X16, VECTOR, Kernel, emits
from glow_cpu.kernels.ops import apply, binary_op, window_max
from glow_cpu.kernels.simd import vector_load
from glow_cpu.kinds import ALL_FLOATS, NUMERIC_KINDS, UNSIGNED, compute_type
from glow_cpu.loops import (
    F32,
    F64,
    I1,
    carried_loop,
    float_at,
    for_range,
    i64,
    linear_index,
    loop_nest,
    row_major_strides,
    shuffle_mask,
)

F64X8 = ir.VectorType(F64, VECTOR // 2)


def _lowest(elem: ElemKind) -> ir.Constant:
    """The identity of a maximum over ``elem``, in its compute type."""
    ty = compute_type(elem)
    if elem.is_float:
        return ir.Constant(ty, -math.inf)
    if elem in UNSIGNED:
        return ir.Constant(ty, 0)
    return ir.Constant(ty, -(1 << (ty.width - 1)))


def _widen(b: ir.IRBuilder, x: ir.Value, ty: ir.Type) -> ir.Value:
    """A float compute value as the (possibly wider) accumulator type ``ty``."""
    return x if x.type == ty else b.fpext(x, ty)


def _narrow(b: ir.IRBuilder, x: ir.Value, ty: ir.Type) -> ir.Value:
    """An accumulator value back in the compute type ``ty`` (rounded once, here)."""
    return x if x.type == ty else b.fptrunc(x, ty)


@emits("ReduceSum", "ReduceMax", kinds=NUMERIC_KINDS)
def emit_reduce(k: Kernel) -> None:
    dest, (src,) = k.dest, k.sources
    axes = set(k.attrs["axes"])
    shape = src.shape
    strides = row_major_strides(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    reduced = [d for d in range(len(shape)) if d in axes]
    is_sum = k.instr.kind == "ReduceSum"
    elem = dest.elem
    b = k.b
    if elem is ElemKind.float32 and reduced == list(range(len(kept), len(shape))):
        _reduce_runs(k, math.prod(shape[d] for d in reduced), is_sum)
        return
    compute = compute_type(elem)
    acc_type = F64 if is_sum and elem.is_float else compute
    combine = binary_op("Add" if is_sum else "Max", elem)
    start, stop = k.split(dest.type.size)
    with for_range(b, stop, start) as o:
        base = _unflatten_offset(b, o, [shape[d] for d in kept], [strides[d] for d in kept])
        acc = k.alloca(acc_type)
        b.store(ir.Constant(acc_type, 0.0 if elem.is_float else 0) if is_sum else _lowest(elem), acc)
        with loop_nest(b, [shape[d] for d in reduced]) as idx:
            offset = b.add(base, linear_index(b, idx, [strides[d] for d in reduced]))
            x = src.load(b, offset)
            x = _widen(b, x, acc_type) if elem.is_float else x
            b.store(combine(b, b.load(acc, typ=acc_type), x), acc)
        result = b.load(acc, typ=acc_type)
        dest.store(b, o, _narrow(b, result, compute) if elem.is_float else result)


def _reduce_runs(k: Kernel, run: int, is_sum: bool) -> None:
    """float32 reduced over its innermost axes: output ``o`` is the sum (in double, two
    ``<8 x double>`` accumulators) or the maximum of the contiguous run of ``run`` elements
    at ``o * run``, 16 at a time, the last vector masked. A global average pool (a 7x7 plane
    per output), a softmax's or a layer norm's row. ``emit_reduce``'s scalar loop adds one
    element per floating-point latency: 0.47 ms for ResNet-50's pool at batch 8 (onnxruntime
    0.08; this loop 0.062)."""
    dest, (src,) = k.dest, k.sources
    b = k.b
    full, rest = divmod(run, VECTOR)
    lowest = ir.Constant(F32X16, [ir.Constant(F32, -math.inf)] * VECTOR)
    halves = [shuffle_mask(list(range(h * 8, h * 8 + 8))) for h in range(2)]

    def vector_at(row: ir.Value, v: ir.Value, lanes: int) -> ir.Value:
        """Vector ``v`` of the run (``lanes`` of it), its missing lanes neutral."""
        value = vector_load(k, float_at(b, row, b.mul(v, i64(VECTOR))), lanes)
        if is_sum or lanes == VECTOR:
            return value  # masked lanes load as 0: nothing to a sum
        kept = ir.Constant(ir.VectorType(I1, VECTOR), [int(i < lanes) for i in range(VECTOR)])
        return b.select(kept, value, lowest)

    def combine(accs: list[ir.Value], value: ir.Value) -> list[ir.Value]:
        if not is_sum:
            return [apply(b, "Max", ElemKind.float32, [accs[0], value])]
        undef = ir.Constant(F32X16, ir.Undefined)
        return [
            b.fadd(acc, b.fpext(b.shuffle_vector(value, undef, half), F64X8))
            for acc, half in zip(accs, halves, strict=True)
        ]

    start, stop = k.split(dest.type.size)
    with for_range(b, stop, start, name="o") as o:
        row = float_at(b, src.ptr, b.mul(o, i64(run)))
        init = [ir.Constant(F64X8, None)] * 2 if is_sum else [lowest]
        accs = carried_loop(
            b, i64(0), i64(full), init, lambda v, accs: combine(accs, vector_at(row, v, VECTOR))
        )
        if rest:
            accs = combine(accs, vector_at(row, i64(full), rest))
        if is_sum:
            total = _horizontal(b, b.fadd(accs[0], accs[1]), b.fadd)
            result = b.fptrunc(total, F32)
        else:
            result = _horizontal(b, accs[0], lambda x, y: apply(b, "Max", ElemKind.float32, [x, y]))
        dest.store(b, o, result)


def _horizontal(b: ir.IRBuilder, vector: ir.Value, combine) -> ir.Value:
    """The lanes of ``vector`` combined pairwise (halves folded onto each other)."""
    lanes = vector.type.count
    while lanes > 1:
        lanes //= 2
        undef = ir.Constant(vector.type, ir.Undefined)
        upper = b.shuffle_vector(
            vector, undef, shuffle_mask(list(range(lanes, 2 * lanes)) + [0] * (vector.type.count - lanes))
        )
        vector = combine(vector, upper)
    return b.extract_element(vector, ir.Constant(ir.IntType(32), 0))


def _unflatten_offset(b: ir.IRBuilder, flat: ir.Value, dims: list[int], strides: list[int]) -> ir.Value:
    """The source offset of output element ``flat`` (row-major over the kept ``dims``)."""
    offset: ir.Value = i64(0)
    rest = flat
    for dim, stride in reversed(list(zip(dims, strides, strict=True))):
        if dim == 1:
            continue
        index = b.urem(rest, i64(dim))
        rest = b.udiv(rest, i64(dim))
        offset = b.add(offset, b.mul(index, i64(stride)))
    return offset


@emits("MaxPool", kinds=NUMERIC_KINDS)
@emits("AvgPool", kinds=ALL_FLOATS)
def emit_pool(k: Kernel) -> None:
    """Each output element visits only the in-bounds part of its window (bounds computed per
    row and column, no per-tap test), so padding never enters a max or a sum. float32 over
    whole windows takes the vector kernel; every other kind this scalar loop (a maximum in
    the kind itself, a float64 mean in double, a half-kind mean in float32)."""
    dest, (src,) = k.dest, k.sources
    elem = dest.elem
    whole_window = k.instr.kind == "MaxPool" or k.attrs["count_include_pad"] or not any(k.attrs["pads"])
    if elem is ElemKind.float32 and whole_window:
        from glow_cpu.kernels.pool import pool_vector

        pool_vector(k)
        return
    if elem in (ElemKind.int8, ElemKind.uint8) and k.instr.kind == "MaxPool" and not k.epilogue:
        from glow_cpu.kernels.int8_pool import int8_max_pool

        int8_max_pool(k)
        return
    n, c, h, w = src.shape
    _, _, oh, ow = dest.shape
    kh, kw = k.attrs["kernel"]
    sh, sw = k.attrs["strides"]
    top, left = k.attrs["pads"][0], k.attrs["pads"][1]
    is_max = k.instr.kind == "MaxPool"
    acc_type = compute_type(elem)
    combine = window_max(elem) if is_max else binary_op("Add", elem)
    b = k.b
    start, stop = k.split(n * c)
    with for_range(b, stop, start, name="plane") as plane, loop_nest(b, [oh, ow]) as (y, x):
        h0, h1 = _window(b, y, sh, top, kh, h)
        w0, w1 = _window(b, x, sw, left, kw, w)
        acc = k.alloca(acc_type)
        b.store(_window_start(elem) if is_max else ir.Constant(acc_type, 0.0), acc)
        base = b.mul(plane, i64(h * w))
        # A window's few taps gain nothing from vectorizing, and LLVM's vectorizer aborts on
        # some (MaxPool[float16-6x6x21x27] on every x86 CPU; MaxPool[float64-1x4x12x14] on
        # AVX-512 ones, once the 2-tap row loop is unrolled and the row loop is innermost):
        # both tap loops stay scalar.
        with (
            for_range(b, h1, h0, name="ih", vectorize=False) as ih,
            for_range(b, w1, w0, name="iw", vectorize=False) as iw,
        ):
            value = src.load(b, b.add(base, b.add(b.mul(ih, i64(w)), iw)))
            b.store(combine(b, b.load(acc, typ=acc_type), value), acc)
        result = b.load(acc, typ=acc_type)
        if not is_max:
            if k.attrs["count_include_pad"]:
                count = ir.Constant(acc_type, float(kh * kw))
            else:
                count = b.sitofp(b.mul(b.sub(h1, h0), b.sub(w1, w0)), acc_type)
            result = b.fdiv(result, count)
        out = b.add(b.mul(plane, i64(oh * ow)), b.add(b.mul(y, i64(ow)), x))
        dest.store(b, out, result)


def _window_start(elem: ElemKind) -> ir.Constant:
    """A MaxPool accumulator's start: NaN for floats (maxnum gives it up to the first
    number), the kind's lowest value for integers."""
    return ir.Constant(compute_type(elem), math.nan) if elem.is_float else _lowest(elem)


def _window(b: ir.IRBuilder, o: ir.Value, stride: int, pad: int, size: int, extent: int):
    """The in-bounds input range ``[lo, hi)`` of output index ``o``'s window."""
    first = b.sub(b.mul(o, i64(stride)), i64(pad))
    lo = b.select(b.icmp_signed("<", first, i64(0)), i64(0), first)
    last = b.add(first, i64(size))
    hi = b.select(b.icmp_signed(">", last, i64(extent)), i64(extent), last)
    return lo, hi
