"""Chains of element-wise operations: one loop nest over the destination, whatever the
operands' broadcasting, so a fused chain reads each input once and writes once.

Every operand is an ``Access`` with element strides over the destination's dimensions.
Dimensions of size 1 are dropped and neighbours that are contiguous for *every* operand
are merged, so the innermost loop is as long as possible and each operand is either
contiguous in it (a vector load) or constant in it (a broadcast): the shape LLVM's
vectorizer turns into 512-bit code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.chain_ops import Access, Op
from glow_cpu.emit import Kernel, Tensor
from glow_cpu.kernels.ops import apply
from glow_cpu.kernels.simd import splat, vector_load
from glow_cpu.kinds import compute_type, storage_type, to_compute
from glow_cpu.loops import F32, float_at, for_range, i64, linear_index, loop_nest, row_major_strides


def _merge(shape: Sequence[int], strides: list[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions, merge neighbours contiguous for every stride vector."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [shape[d] for d in keep]
    columns = [[s[d] for d in keep] for s in strides]
    out_dims: list[int] = []
    out_cols: list[list[int]] = [[] for _ in strides]
    for j, n in enumerate(dims):
        if out_dims and all(col[j] * n == out[-1] for col, out in zip(columns, out_cols, strict=True)):
            out_dims[-1] *= n
            for col, out in zip(columns, out_cols, strict=True):
                out[-1] = col[j]
            continue
        out_dims.append(n)
        for col, out in zip(columns, out_cols, strict=True):
            out.append(col[j])
    if not out_dims:
        return [1], [[1] for _ in strides]
    return out_dims, out_cols


def _buffers(ops: Sequence[Op]) -> list[Access]:
    return [a for op in ops for a in op.operands if a.kind == "buffer"]


def chain_loop(
    k: Kernel,
    dest: Tensor,
    ops: Sequence[Op],
    initial: tuple[Tensor, Sequence[int]] | None = None,
    also: Sequence[Tensor] = (),
) -> None:
    """``dest[i] = ops(...)`` for every destination index i; with ``initial`` the chain
    starts from that tensor read at the given strides (the first op then reads CHAIN), plus
    each tensor of ``also`` read at the same strides, added in order."""
    shape = dest.shape
    buffers = _buffers(ops)
    strides = [row_major_strides(shape), *(a.strides for a in buffers)]
    if initial is not None:
        strides.append(initial[1])
    dims, cols = _merge(shape, strides)
    if dest.type.size == 0:
        return
    b = k.b
    start, stop = k.split(dims[0])
    with for_range(b, stop, start, name="outer") as outer, loop_nest(b, dims[1:]) as inner:
        idx = [outer, *inner]
        offsets = {id(a): linear_index(b, idx, col) for a, col in zip(buffers, cols[1:], strict=False)}
        value = None
        if initial is not None:
            at = linear_index(b, idx, cols[-1])
            value = initial[0].load(b, at)
            for addend in also:
                value = b.fadd(value, addend.load(b, at))
        for op in ops:
            args = [value if a.kind == "chain" else _read(k, a, offsets, dest.elem) for a in op.operands]
            value = apply(b, op.kind, dest.elem, args)
        dest.store(b, linear_index(b, idx, cols[0]), value)


def _read(k: Kernel, access: Access, offsets: dict[int, ir.Value], elem: ElemKind) -> ir.Value:
    if access.kind == "splat":
        return ir.Constant(compute_type(elem), access.constant if elem.is_float else int(access.constant))
    source_elem = access.value.type.elem
    ptr = k.b.gep(k.pointer(access.value), [offsets[id(access)]], source_etype=storage_type(source_elem))
    return to_compute(k.b, k.b.load(ptr, typ=storage_type(source_elem)), source_elem)


def read_vector(k: Kernel, access: Access, offset: ir.Value, contiguous: bool, lanes: int) -> ir.Value:
    """A float32 operand as 16 lanes at element ``offset``: a (masked) vector load when it is
    contiguous along the lanes, else the one value splat (a broadcast along them)."""
    b = k.b
    if access.kind == "splat":
        return splat(b, ir.Constant(F32, access.constant))
    ptr = b.gep(k.pointer(access.value), [offset], source_etype=F32)
    if contiguous:
        return vector_load(k, ptr, lanes)
    return splat(b, b.load(ptr, typ=F32))


def epilogue_pass(k: Kernel) -> None:
    """The fused element-wise chain as its own phase, over the finished result in place:
    for a producer that could not apply it as it stored."""
    k.phase()
    dest = k.dest
    chain_loop(k, dest, k.epilogue, (dest, row_major_strides(dest.shape)))


def tile_epilogue(
    k: Kernel,
    shape: Sequence[int],
    fixed: Sequence[tuple[int, ir.Value]],
    row_dim: int,
    row_base: ir.Value,
    ops: Sequence[Op] | None = None,
) -> Callable[[ir.Value, ir.Value, ir.Value, int], ir.Value] | None:
    """The epilogue applied to one GEMM result vector, or None if an operand cannot be read
    along GEMM columns (then the caller runs ``chain_loop`` over the result instead).

    The result has dimensions ``shape``; ``fixed`` gives (dimension, index) pairs known in
    the enclosing loops (the image), GEMM rows run along ``row_dim`` from ``row_base``, and
    GEMM columns along all dimensions after it, flattened. An operand must be contiguous
    along those (a vector load) or constant along them (one value, splat).

    ``ops``: the chain to apply, the kernel's own (``k.epilogue``) unless given (a kernel
    computing two instructions applies each one's, ``expand_depthwise.py``).
    """
    ops = k.epilogue if ops is None else ops
    col_shape = tuple(shape[row_dim + 1 :])
    contiguous = row_major_strides(col_shape)
    modes: dict[int, bool] = {}
    for access in _buffers(ops):
        cols = tuple(access.strides[row_dim + 1 :])
        if cols == contiguous or (cols and all(s == 0 for s in cols)):
            modes[id(access)] = cols == contiguous
        else:
            return None

    def offset_at(access: Access, row_index: ir.Value, col: ir.Value | None) -> ir.Value:
        """Element offset of ``access`` at the fixed indices, GEMM row ``row_index`` and
        (when it runs along the columns) column ``col``."""
        b = k.b
        offset = i64(0)
        for dim, index in fixed:
            offset = b.add(offset, b.mul(index, i64(access.strides[dim])))
        offset = b.add(offset, b.mul(row_index, i64(access.strides[row_dim])))
        return offset if col is None else b.add(offset, col)

    def apply_ops(row: ir.Value, col: ir.Value, value: ir.Value, lanes: int) -> ir.Value:
        b = k.b
        row_index = b.add(row_base, row)
        for op in ops:
            args = []
            for access in op.operands:
                if access.kind == "chain":
                    args.append(value)
                    continue
                offset = i64(0)
                if access.kind == "buffer":
                    offset = offset_at(access, row_index, col if modes[id(access)] else None)
                args.append(read_vector(k, access, offset, modes.get(id(access), False), lanes))
            value = apply(b, op.kind, ElemKind.float32, args)
        return value

    def streams(row: ir.Value, col: ir.Value) -> list[ir.Value]:
        """Where the operands read along GEMM columns are at (row, col): for prefetching."""
        row_index = k.b.add(row_base, row)
        return [
            float_at(k.b, k.pointer(access.value), offset_at(access, row_index, col))
            for access in _buffers(ops)
            if modes[id(access)]
        ]

    apply_ops.streams = streams  # type: ignore[attr-defined]
    return apply_ops
