"""A strided copy that swaps the contiguous dimension, in 8 x 8 tiles of 4-byte elements.

``movement.strided_copy`` moves one element per iteration: where the destination's
contiguous dimension is strided in the source (an attention's K transposed to
``[heads, head_dim, seq]``), every load is a cache line of its own, and LLVM's vectorizer
makes gathers of them. Here 8 rows of 8 source-contiguous elements are loaded as vectors,
transposed in registers (three rounds of two-input shuffles, 24 in all) and stored as 8
destination-contiguous vectors. Elements move as 32-bit integers: bits, not values.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from glow_cpu.emit import Kernel, Tensor
from glow_cpu.loops import I32, for_range, i64, linear_index, loop_nest, shuffle_mask

TILE = 8
_I32X8 = ir.VectorType(I32, TILE)
_CONSECUTIVE = [(0, 1), (2, 3), (4, 5), (6, 7)]
_ALTERNATE = [(0, 2), (1, 3), (4, 6), (5, 7)]
_LOW_HIGH = [(0, 4), (1, 5), (2, 6), (3, 7)]
_ROUNDS = (
    # (input pairs, low mask, high mask, where each pair's low and high results go); after
    # the third round vector c holds column c of the tile
    (_CONSECUTIVE, [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15], _CONSECUTIVE),
    (_ALTERNATE, [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15], _CONSECUTIVE),
    (_LOW_HIGH, [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15], _LOW_HIGH),
)


def tile_plan(
    shape: Sequence[int], dst: Sequence[int], src: Sequence[int], itemsize: int
) -> tuple[int, int] | None:
    """(i, j) when the copy is a tiled transpose: 4-byte elements, dimension ``i`` is the
    destination's contiguous one (stride 1) and strided in the source, ``j`` the source's
    contiguous one, both multiples of 8 long; else None. Shapes come simplified
    (``movement._simplify``: no size-1 dimensions)."""
    if itemsize != 4 or len(shape) < 2:
        return None
    i = len(shape) - 1
    if dst[i] != 1 or src[i] == 1 or 1 not in src:
        return None
    j = list(src).index(1)
    if shape[i] % TILE or shape[j] % TILE:
        return None
    return i, j


def transpose8(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 8 columns of the 8 x 8 tile whose rows are ``rows`` (8-lane vectors of any
    4-byte element: the shuffles move bits)."""
    vectors = rows
    for pairs, low, high, outs in _ROUNDS:
        out: list[ir.Value] = list(vectors)
        for (x, y), (lo_at, hi_at) in zip(pairs, outs, strict=True):
            out[lo_at] = b.shuffle_vector(vectors[x], vectors[y], shuffle_mask(low))
            out[hi_at] = b.shuffle_vector(vectors[x], vectors[y], shuffle_mask(high))
        vectors = out
    return vectors


def tiled_transpose(
    k: Kernel,
    dest: Tensor,
    src: Tensor,
    shape: Sequence[int],
    dst_strides: Sequence[int],
    src_strides: Sequence[int],
    plan: tuple[int, int],
    dst_offset: int = 0,
    src_offset: int = 0,
) -> None:
    """``strided_copy`` for a copy ``tile_plan`` accepted: a loop over the other dimensions
    and the tiles, parts split over the outermost loop."""
    i, j = plan
    b = k.b
    others = [d for d in range(len(shape)) if d not in (i, j)]
    loops = [shape[d] for d in others] + [shape[j] // TILE, shape[i] // TILE]
    start, stop = k.split(loops[0])
    with for_range(b, stop, start, name="outer") as outer, loop_nest(b, loops[1:]) as inner:
        idx = [outer, *inner]
        here = idx[: len(others)]
        jb, ib = (b.mul(v, i64(TILE)) for v in idx[len(others) :])
        src_base = b.add(linear_index(b, here, [src_strides[d] for d in others]), i64(src_offset))
        dst_base = b.add(linear_index(b, here, [dst_strides[d] for d in others]), i64(dst_offset))
        src_base = b.add(src_base, b.add(b.mul(jb, i64(src_strides[j])), b.mul(ib, i64(src_strides[i]))))
        dst_base = b.add(dst_base, b.add(b.mul(jb, i64(dst_strides[j])), ib))
        rows = []
        for r in range(TILE):  # row r: i = ib + r, j = jb .. jb + 7 (contiguous in the source)
            at = b.gep(src.ptr, [b.add(src_base, i64(r * src_strides[i]))], source_etype=I32)
            rows.append(b.load(at, typ=_I32X8, align=4))
        for c, column in enumerate(transpose8(b, rows)):  # column c: j = jb + c, i = ib .. ib + 7
            at = b.gep(dest.ptr, [b.add(dst_base, i64(c * dst_strides[j]))], source_etype=I32)
            b.store(column, at, align=4)
