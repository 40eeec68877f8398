"""Reductions (ReduceSum, ReduceMax) and pooling (MaxPool, AvgPool, NCHW).

Float sums accumulate in double: the reductions in the models (softmax, layer norm,
global average pooling) are short, and a float64 accumulator keeps the result within an ulp
of the reference whatever the length.
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import FLOATS, NUMERIC_KINDS, Kernel, compute_type, emits, intrinsic
from glow_cpu.loops import F32, F64, for_range, i64, linear_index, loop_nest, row_major_strides


def _max_op(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    if isinstance(x.type, ir.FloatType):
        return b.call(intrinsic(b.module, "llvm.maximum.f32", F32, [F32, F32]), [x, y])
    fn = intrinsic(b.module, f"llvm.smax.i{x.type.width}", x.type, [x.type, x.type])
    return b.call(fn, [x, y])


def _lowest(elem: ElemKind) -> ir.Constant:
    if elem.is_float:
        return ir.Constant(F32, -math.inf)
    ty = compute_type(elem)
    return ir.Constant(ty, -(1 << (ty.width - 1)))


@emits("ReduceSum", "ReduceMax", kinds=NUMERIC_KINDS)
def emit_reduce(k: Kernel) -> None:
    dest, (src,) = k.dest, k.sources
    axes = set(k.attrs["axes"])
    shape = src.shape
    strides = row_major_strides(shape)
    kept = [d for d in range(len(shape)) if d not in axes]
    reduced = [d for d in range(len(shape)) if d in axes]
    is_sum = k.instr.kind == "ReduceSum"
    b = k.b
    acc_type = F64 if is_sum and dest.elem.is_float else compute_type(dest.elem)
    start, stop = k.split(dest.type.size)
    with for_range(b, stop, start) as o:
        base = _unflatten_offset(b, o, [shape[d] for d in kept], [strides[d] for d in kept])
        acc = k.alloca(acc_type)
        b.store(ir.Constant(acc_type, 0) if is_sum else _lowest(dest.elem), acc)
        with loop_nest(b, [shape[d] for d in reduced]) as idx:
            offset = b.add(base, linear_index(b, idx, [strides[d] for d in reduced]))
            x = src.load(b, offset)
            current = b.load(acc, typ=acc_type)
            if is_sum:
                x = b.fpext(x, F64) if acc_type is F64 else x
                new = b.add(current, x) if isinstance(acc_type, ir.IntType) else b.fadd(current, x)
            else:
                new = _max_op(b, current, x)
            b.store(new, acc)
        result = b.load(acc, typ=acc_type)
        dest.store(b, o, b.fptrunc(result, F32) if acc_type is F64 else result)


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


@emits("MaxPool", "AvgPool", kinds=FLOATS)
def emit_pool(k: Kernel) -> None:
    """Each output element visits only the in-bounds part of its window (bounds computed per
    row and column, no per-tap test), so padding never enters a max or a sum."""
    dest, (src,) = k.dest, k.sources
    whole_window = k.instr.kind == "MaxPool" or k.attrs["count_include_pad"] or not any(k.attrs["pads"])
    if dest.elem is ElemKind.float32 and whole_window:
        from glow_cpu.kernels.conv import pool_vector

        pool_vector(k)
        return
    n, c, h, w = src.shape
    _, _, oh, ow = dest.shape
    kh, kw = k.attrs["kernel"]
    sh, sw = k.attrs["strides"]
    top, left = k.attrs["pads"][0], k.attrs["pads"][1]
    is_max = k.instr.kind == "MaxPool"
    b = k.b
    start, stop = k.split(n * c)
    with for_range(b, stop, start, name="plane") as plane, loop_nest(b, [oh, ow]) as (y, x):
        h0, h1 = _window(b, y, sh, top, kh, h)
        w0, w1 = _window(b, x, sw, left, kw, w)
        acc = k.alloca(F32)
        b.store(ir.Constant(F32, -math.inf if is_max else 0.0), acc)
        base = b.mul(plane, i64(h * w))
        with for_range(b, h1, h0, name="ih") as ih, for_range(b, w1, w0, name="iw") as iw:
            value = src.load(b, b.add(base, b.add(b.mul(ih, i64(w)), iw)))
            current = b.load(acc, typ=F32)
            b.store(_max_op(b, current, value) if is_max else b.fadd(current, value), acc)
        result = b.load(acc, typ=F32)
        if not is_max:
            if k.attrs["count_include_pad"]:
                count = ir.Constant(F32, float(kh * kw))
            else:
                count = b.sitofp(b.mul(b.sub(h1, h0), b.sub(w1, w0)), F32)
            result = b.fdiv(result, count)
        out = b.add(b.mul(plane, i64(oh * ow)), b.add(b.mul(y, i64(ow)), x))
        dest.store(b, out, result)


def _window(b: ir.IRBuilder, o: ir.Value, stride: int, pad: int, size: int, extent: int):
    """The in-bounds input range ``[lo, hi)`` of output index ``o``'s window."""
    first = b.sub(b.mul(o, i64(stride)), i64(pad))
    lo = b.select(b.icmp_signed("<", first, i64(0)), i64(0), first)
    last = b.add(first, i64(size))
    hi = b.select(b.icmp_signed(">", last, i64(extent)), i64(extent), last)
    return lo, hi
