"""Data movement and creation: Copy, Reshape, Splat, Broadcast, Transpose, Slice, Concat, Pad,
Gather, Convert.

Most of them are one *strided copy*: a loop nest over the result where each side's address
is a linear function of the indices. Size-1 dimensions are dropped and dimensions that are
contiguous on both sides are merged first, so a plain copy is one flat loop (LLVM turns it
into ``memcpy``) and the innermost loop is as long as it can be. Elements move as raw
storage (no float round trip), so every element kind is supported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, Tensor, emits, intrinsic
from glow_cpu.kernels.transpose_tiles import tile_plan, tiled_transpose
from glow_cpu.kinds import STORED_KINDS, UNSIGNED, compute_type, storage_type, to_compute
from glow_cpu.loops import F64, I8, I64, for_range, i64, linear_index, loop_nest, row_major_strides

_GRAIN = 64


def _simplify(
    shape: Sequence[int], dst: Sequence[int], src: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """Drop size-1 dims and merge neighbours that are contiguous on both sides."""
    dims = [(n, d, s) for n, d, s in zip(shape, dst, src, strict=True) if n != 1]
    merged: list[tuple[int, int, int]] = []
    for n, d, s in dims:
        if merged:
            pn, pd, ps = merged[-1]
            if pd == d * n and ps == s * n:
                merged[-1] = (pn * n, d, s)
                continue
        merged.append((n, d, s))
    if not merged:
        merged = [(1, 1, 1)]
    return [m[0] for m in merged], [m[1] for m in merged], [m[2] for m in merged]


def strided_copy(
    k: Kernel,
    dest: Tensor,
    src: Tensor,
    shape: Sequence[int],
    dst_strides: Sequence[int],
    src_strides: Sequence[int],
    dst_offset: int = 0,
    src_offset: int = 0,
) -> None:
    """``dest[dst_offset + idx . dst_strides] = src[src_offset + idx . src_strides]`` over ``shape``."""
    if math.prod(shape) == 0:
        return
    shape, dst_strides, src_strides = _simplify(shape, dst_strides, src_strides)
    plan = tile_plan(shape, dst_strides, src_strides, dest.type.elem.itemsize)
    if plan is not None:
        tiled_transpose(k, dest, src, shape, dst_strides, src_strides, plan, dst_offset, src_offset)
        return
    b = k.b
    elem = storage_type(dest.elem)
    start, stop = k.split(shape[0])
    with for_range(b, stop, start, name="outer") as outer, loop_nest(b, shape[1:]) as inner:
        idx = [outer, *inner]
        d = b.add(linear_index(b, idx, dst_strides), i64(dst_offset))
        s = b.add(linear_index(b, idx, src_strides), i64(src_offset))
        value = b.load(b.gep(src.ptr, [s], source_etype=elem), typ=elem)
        b.store(value, b.gep(dest.ptr, [d], source_etype=elem))


def _flat_copy(k: Kernel, dest: Tensor, src: Tensor) -> None:
    b = k.b
    start, stop = k.split(dest.type.nbytes, 4096)
    with for_range(b, stop, start) as i:
        b.store(b.load(b.gep(src.ptr, [i], source_etype=I8), typ=I8), b.gep(dest.ptr, [i], source_etype=I8))


@emits("Copy", "Reshape", "BitCast", kinds=STORED_KINDS)
def emit_copy(k: Kernel) -> None:
    """The bytes as they are (Reshape and BitCast are views in IRGen; this is their copy)."""
    _flat_copy(k, k.dest, k.sources[0])


def _fill(k: Kernel) -> None:
    """Every element of dest (this thread's share) set to the ``value`` attribute."""
    dest = k.dest
    value = _constant(dest.elem, k.attrs["value"])
    start, stop = k.split(dest.type.size, _GRAIN)
    with for_range(k.b, stop, start) as i:
        dest.store(k.b, i, value)


@emits("Splat", kinds=STORED_KINDS)
def emit_splat(k: Kernel) -> None:
    _fill(k)


def _constant(elem: ElemKind, value: float | int | bool) -> ir.Constant:
    ty = compute_type(elem)
    if elem.is_float:
        return ir.Constant(ty, float(value))
    if elem is ElemKind.bool:
        return ir.Constant(ty, int(bool(value)))
    return ir.Constant(ty, int(value))


@emits("Broadcast", kinds=STORED_KINDS)
def emit_broadcast(k: Kernel) -> None:
    dest, (src,) = k.dest, k.sources
    out = dest.shape
    padded = (1,) * (len(out) - src.type.rank) + src.shape
    src_strides = [0 if n == 1 else s for n, s in zip(padded, row_major_strides(padded), strict=True)]
    strided_copy(k, dest, src, out, row_major_strides(out), src_strides)


@emits("Transpose", kinds=STORED_KINDS)
def emit_transpose(k: Kernel) -> None:
    dest, (src,) = k.dest, k.sources
    strides = row_major_strides(src.shape)
    src_strides = [strides[axis] for axis in k.attrs["shuffle"]]
    strided_copy(k, dest, src, dest.shape, row_major_strides(dest.shape), src_strides)


@emits("Slice", kinds=STORED_KINDS)
def emit_slice(k: Kernel) -> None:
    dest, (src,) = k.dest, k.sources
    steps = k.attrs["steps"] or (1,) * src.type.rank
    strides = row_major_strides(src.shape)
    offset = sum(start * s for start, s in zip(k.attrs["starts"], strides, strict=True))
    src_strides = [step * s for step, s in zip(steps, strides, strict=True)]
    strided_copy(k, dest, src, dest.shape, row_major_strides(dest.shape), src_strides, 0, offset)


@emits("Concat", kinds=STORED_KINDS)
def emit_concat(k: Kernel) -> None:
    dest = k.dest
    axis = k.attrs["axis"] % dest.type.rank
    dst_strides = row_major_strides(dest.shape)
    position = 0
    for src in k.sources:
        offset = position * dst_strides[axis]
        strided_copy(k, dest, src, src.shape, dst_strides, row_major_strides(src.shape), offset)
        position += src.shape[axis]


@emits("Pad", kinds=STORED_KINDS)
def emit_pad(k: Kernel) -> None:
    """Fill with the pad value, then (a second phase, after every thread filled) copy the input in."""
    _fill(k)
    k.phase()
    dest, (src,) = k.dest, k.sources
    pads, rank = k.attrs["pads"], src.type.rank
    dst_strides = row_major_strides(dest.shape)
    offset = sum(pads[i] * dst_strides[i] for i in range(rank))
    strided_copy(k, dest, src, src.shape, dst_strides, row_major_strides(src.shape), offset)


@emits("Gather", kinds=STORED_KINDS)
def emit_gather(k: Kernel) -> None:
    """out[pre, j, post] = data[pre, indices[j], post]; negative indices count back, and an
    index out of range is clamped (never a wild read)."""
    dest, (data, indices) = k.dest, k.sources
    axis = k.attrs["axis"] % data.type.rank
    outer = math.prod(data.shape[:axis])
    extent = data.shape[axis]
    inner = math.prod(data.shape[axis + 1 :])
    count = indices.type.size
    b = k.b
    elem = storage_type(dest.elem)
    start, stop = k.split(outer * count)
    with for_range(b, stop, start) as row:
        o = b.udiv(row, i64(count))
        j = b.urem(row, i64(count))
        index = b.sext(indices.load(b, j), I64) if indices.elem is not ElemKind.int64 else indices.load(b, j)
        index = b.select(b.icmp_signed("<", index, i64(0)), b.add(index, i64(extent)), index)
        index = _clamp_index(b, index, extent)
        src_row = b.add(b.mul(o, i64(extent)), index)
        with for_range(b, inner) as t:
            s = b.add(b.mul(src_row, i64(inner)), t)
            d = b.add(b.mul(row, i64(inner)), t)
            value = b.load(b.gep(data.ptr, [s], source_etype=elem), typ=elem)
            b.store(value, b.gep(dest.ptr, [d], source_etype=elem))


def _clamp_index(b: ir.IRBuilder, index: ir.Value, extent: int) -> ir.Value:
    index = b.select(b.icmp_signed("<", index, i64(0)), i64(0), index)
    return b.select(b.icmp_signed(">=", index, i64(extent)), i64(max(extent - 1, 0)), index)


@emits("Convert", kinds=STORED_KINDS)
def emit_convert(k: Kernel) -> None:
    dest, (src,) = k.dest, k.sources
    b = k.b
    start, stop = k.split(dest.type.size, _GRAIN)
    with for_range(b, stop, start) as i:
        raw = b.load(src.at(b, i), typ=storage_type(src.elem))
        dest.store(b, i, convert(b, to_compute(b, raw, src.elem), src.elem, dest.elem))


def convert(b: ir.IRBuilder, value: ir.Value, src: ElemKind, dst: ElemKind) -> ir.Value:
    """A compute value of kind ``src`` as a compute value of kind ``dst`` (numpy astype rules:
    float to int truncates toward zero, saturating; anything to bool is ``!= 0``)."""
    to = compute_type(dst)
    if dst is ElemKind.bool:
        zero = ir.Constant(value.type, 0.0 if src.is_float else 0)
        nonzero = b.fcmp_unordered("une", value, zero) if src.is_float else b.icmp_unsigned("!=", value, zero)
        return b.zext(nonzero, to)
    if src.is_float and dst.is_float:
        if value.type == to:
            return value
        return b.fpext(value, to) if to == F64 else b.fptrunc(value, to)
    if src.is_float:
        # Unsigned results wrap like numpy's (-1.5 -> 255 for uint8): through int64.
        wide = I64 if dst in UNSIGNED else to
        name = f"llvm.fptosi.sat.i{wide.width}.{'f64' if value.type == F64 else 'f32'}"
        result = b.call(intrinsic(b.module, name, wide, [value.type]), [value])
        return b.trunc(result, to) if wide.width > to.width else result
    unsigned = src in UNSIGNED or src is ElemKind.bool
    if dst.is_float:
        return b.uitofp(value, to) if unsigned else b.sitofp(value, to)
    if value.type.width == to.width:
        return value
    if value.type.width > to.width:
        return b.trunc(value, to)
    return b.zext(value, to) if unsigned else b.sext(value, to)
