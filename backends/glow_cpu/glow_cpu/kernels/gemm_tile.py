"""The GEMM micro-kernel: one ``mr x nr`` tile of C kept in vector accumulators over a run
of k (``tile_at``), its partial tiles at the edges, its prefetches, and its stores through the
epilogue. ``gemm.py`` decides which tiles run where; this file is what each one does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.gemm_shape import KC, LINE, UNROLL, Flags, Gemm, b_row_offset, live_accumulators
from glow_cpu.kernels.simd import fma as _fma
from glow_cpu.kernels.simd import lane_mask as _mask
from glow_cpu.kernels.simd import masked_load as _load
from glow_cpu.kernels.simd import masked_store as _store
from glow_cpu.kernels.simd import prefetch
from glow_cpu.kernels.simd import splat as _splat
from glow_cpu.loops import F32, I32, carried_loop, i32, i64
from glow_cpu.registers import sixteen_lane_registers


def tile_at(
    k: Kernel,
    g: Gemm,
    ip: ir.Value,
    jp: ir.Value,
    lo: ir.Value,
    hi: ir.Value,
    flags: Flags,
    counts: tuple[int, int, int, int],
) -> None:
    """The tile of row panel ``ip`` and column panel ``jp``, full or partial."""
    n_full, n_rest, m_full, m_rest = counts
    b = k.b

    def rows(nr: int) -> None:
        if m_rest == 0:
            _tile(k, g, ip, jp, g.mr, nr, lo, hi, flags)
            return
        with b.if_else(b.icmp_signed("<", ip, i64(m_full))) as (full, partial):
            with full:
                _tile(k, g, ip, jp, g.mr, nr, lo, hi, flags)
            with partial:
                _tile(k, g, ip, jp, m_rest, nr, lo, hi, flags)

    if n_rest == 0:
        rows(g.nr)
        return
    with b.if_else(b.icmp_signed("<", jp, i64(n_full))) as (full, partial):
        with full:
            rows(g.nr)
        with partial:
            rows(n_rest)


def _tile(
    k: Kernel,
    g: Gemm,
    ip: ir.Value,
    jp: ir.Value,
    mr: int,
    nr: int,
    lo: ir.Value,
    hi: ir.Value,
    flags: tuple[ir.Value | bool, ir.Value | bool],
) -> None:
    """One mr x nr tile of C over k in [lo, hi).

    Whole vectors of columns accumulate row by row (a broadcast of A times a vector of
    B). A last partial vector of ``tail`` columns, when narrower than the tile is tall,
    accumulates column by column instead: a vector of A's ``mr`` rows times a broadcast
    of B, ``tail`` FMAs per k rather than ``mr`` mostly idle ones (a 7x7 plane is 49
    columns: three vectors and one column), transposed into rows before the store."""
    b = k.b
    a_base = b.gep(g.a, [b.mul(ip, i64(g.a_panel))], source_etype=F32)
    b_base = b.gep(g.b, [b.mul(jp, i64(g.b_panel))], source_etype=F32)
    row0 = b.mul(ip, i64(g.mr))
    c_base = b.gep(g.c, [b.add(b.mul(row0, i64(g.ldc)), b.mul(jp, i64(g.nr)))], source_etype=F32)
    nv = -(-nr // VECTOR)
    masks = [_mask(min(VECTOR, nr - v * VECTOR)) for v in range(nv)]
    load_masks = [None] * nv if g.b_padded else masks
    tail = _column_tail(g, mr, nr)
    nvec = nv - (tail > 0)  # vectors accumulated row by row
    width = tail_width(mr)  # lanes of a column accumulator (A's rows)
    zero = ir.Constant(F32X16, None)
    a_ahead = b.gep(a_base, [i64(g.a_panel)], source_etype=F32) if _prefetches_a(g, mr) else None
    steps_per_line = max(1, LINE // (4 * mr))
    emitted = itertools.count()
    b_ahead, b_lines = None, 0
    if _prefetches_b(g, mr, nr, k.accumulators):
        # this row panel's share of the next column panel's lines at each k: ``b_lines`` of
        # the ``lines`` a k has, from line (ip * b_lines) mod lines on, so the row panels
        # together cover every line (a product of one row panel takes them all)
        lines = g.nr * 4 // LINE
        b_lines = -(-lines // -(-g.m // g.mr))
        slot = b.mul(b.urem(b.mul(ip, i64(b_lines)), i64(lines)), i64(LINE // 4))
        b_ahead = b.gep(b_base, [b.add(i64(g.b_panel), slot)], source_etype=F32)

    def step(kk: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        out = list(accs)
        if a_ahead is not None and next(emitted) % steps_per_line == 0:
            prefetch(k, b.gep(a_ahead, [b.mul(kk, i64(g.a_k))], source_etype=F32), locality=2)
        if b_ahead is not None:
            row_ahead = b.gep(b_ahead, [b.mul(kk, i64(g.b_outer))], source_etype=F32)
            for line in range(b_lines):
                prefetch(k, b.gep(row_ahead, [i64(line * LINE // 4)], source_etype=F32), locality=2)
        b_row = b.gep(b_base, [b_row_offset(b, g, kk)], source_etype=F32)
        vectors = [
            _load(k, b.gep(b_row, [i64(v * VECTOR)], source_etype=F32), load_masks[v]) for v in range(nvec)
        ]
        a_col = b.gep(a_base, [b.mul(kk, i64(g.a_k))], source_etype=F32)
        for r in range(mr):
            scalar = b.load(b.gep(a_col, [i64(r * g.a_row)], source_etype=F32), typ=F32)
            splat = _splat(b, scalar)
            for v in range(nvec):
                out[r * nvec + v] = _fma(k, splat, vectors[v], out[r * nvec + v])
        if tail:
            rows = _load(k, a_col, _mask(mr, width), width)
            for j in range(tail):
                scalar = b.load(b.gep(b_row, [i64(nvec * VECTOR + j)], source_etype=F32), typ=F32)
                out[mr * nvec + j] = _fma(k, _splat(b, scalar, width), rows, out[mr * nvec + j])
        return out

    if g.dense is None and (mr, nr) == (g.mr, g.nr):
        _prefetch_epilogue(k, g, row0, b.mul(b.add(jp, i64(1)), i64(g.nr)), mr, nv)
    # The main tile (or a panel that is all of C's columns) unrolls its k loop; an edge tile
    # unrolls only as far as it has independent accumulator chains (``edge_chains``).
    count = mr * nvec + -(-tail * width // VECTOR)  # in 16-lane vectors
    main = mr == g.mr and nr in (g.nr, g.n)
    chains = edge_chains(count, k.accumulators) if g.chained_edges and not main else 1
    unroll = UNROLL if main else chains
    whole = g.depth % unroll == 0 and min(KC, g.depth) % unroll == 0
    init = [zero] * (mr * nvec) + [ir.Constant(ir.VectorType(F32, width), None)] * tail
    accs = _k_loop(b, lo, hi, init, step, unroll, whole, chains)
    col0 = b.mul(jp, i64(g.nr))
    columns = [b.add(col0, i64(v * VECTOR)) for v in range(nv)]
    dense = [_dense_columns(k, g, column, masks[v]) for v, column in enumerate(columns)] if g.dense else None
    for r in range(mr):
        row = b.add(row0, i64(r))
        for v in range(nv):
            lanes = min(VECTOR, nr - v * VECTOR)
            value = accs[r * nvec + v] if v < nvec else _row_of(b, accs[mr * nvec :], r)
            if dense is None:
                ptr = b.gep(c_base, [i64(r * g.ldc + v * VECTOR)], source_etype=F32)
                memory = _Memory(ptr, masks[v])
            else:
                offset, kept, prefix = dense[v]
                ptr = b.gep(g.c, [b.add(b.mul(row, i64(g.ldc)), offset)], source_etype=F32)
                memory = _Memory(ptr, prefix)
                value = _compress(k, value, kept)
            _store_tile(k, g, memory, value, flags, (row, columns[v], lanes))


def _prefetches_a(g: Gemm, mr: int) -> bool:
    """Whether a tile prefetches the next row panel's A at the k it is at: A packed at
    compile time (``mr`` floats per k, one contiguous run per panel), in the main tile.

    Inside a whole model the weights outgrow the L3 and each layer's filter comes from
    memory; a row panel's A is new to every tile that starts it, and its block of K lies a
    panel (``depth * mr`` floats) away from the last one read, where the hardware
    prefetchers do not look ahead. One prefetch per line, into L2."""
    return g.a_row == 1 and g.a_k == mr and mr == g.mr


PREFETCH_B = True
"""Whether products whose B is a packed weight prefetch its next column panel (tests and
benches turn it off to compare)."""


def _prefetches_b(g: Gemm, mr: int, nr: int, accumulators: int) -> bool:
    """Whether a tile prefetches its share of the next column panel's B, in the main tile of
    a product of more than one column panel on a target with 16-lane registers (AVX-512):
    B packed at compile time (a weight, one contiguous run of ``nr`` floats per k per
    panel), or B read in place with its rows on pages of their own
    (``Gemm.b_far_rows_in_place``: ``gemm._in_place_avx512`` reads such a B in place for a
    few row panels; a product of one row panel always reads B in place).

    Inside a model a weight comes from memory at every run, and the first row panel of each
    column panel read it at the FMAs' pace (three lines a k for a 48-column panel), far
    faster than one core's share of memory delivers: the hardware prefetchers follow a
    stream within a page only. An activation read in place a plane a row apart leaves them
    nothing to follow at all. Spread over the current panel's row panels, the next panel
    arrives in L2 before it is needed. Measured on an Intel Xeon (AVX-512), one thread,
    onnxruntime alternating in one process (docs/performance.md): BERT-mini at batch 1, its
    24 products 4.98 -> 4.42 and 5.21 -> 4.73 ms, the whole model 0.80x -> 0.73x
    onnxruntime in both compile orders; MobileNetV2's 28x28 projections at batch 8 (packed
    before; in place, 4 row panels) 0.50-0.77 -> 0.43-0.61 ms. On 14x14 planes, whose rows
    share pages, the prefetches cost 3-4%. AVX2 targets were not measured and keep the
    hardware's prefetching alone."""
    if not (
        PREFETCH_B
        and sixteen_lane_registers(accumulators)
        and g.n > g.nr
        and (mr, nr) == (g.mr, g.nr)
        and g.nr * 4 % LINE == 0
    ):
        return False
    weight = g.b_padded and g.b_in_panels and g.b_panel == g.depth * g.nr
    return weight or g.b_far_rows_in_place


def _prefetch_epilogue(k: Kernel, g: Gemm, row0: ir.Value, next_col: ir.Value, mr: int, nv: int) -> None:
    """Ask for the lines the next tile's epilogue reads (same rows, next column panel: a
    residual) while this tile computes: its rows lie a plane apart, one stream each, more
    than the hardware prefetchers follow. Measured on ResNet-50 at batch 8 (one thread):
    the 1x1 convolutions with a residual 144.8 -> 138.7 ms; prefetching C's lines for the
    store as well made the others 1-3% slower."""
    streams = getattr(g.epilogue, "streams", None)
    if streams is None:
        return
    b = k.b
    for r in range(mr):
        for ptr in streams(b.add(row0, i64(r)), next_col):
            for v in range(nv):
                prefetch(k, b.gep(ptr, [i64(v * VECTOR)], source_etype=F32))


def _column_tail(g: Gemm, mr: int, nr: int) -> int:
    """Columns of a tile's last partial vector accumulated as vectors over rows, or 0.

    Needs A's rows contiguous at each k (a packed filter or matrix), and pays when the
    partial vector has fewer columns than the tile has rows."""
    tail = nr % VECTOR
    return tail if g.a_row == 1 and 0 < tail < mr else 0


def tail_width(mr: int) -> int:
    """Lanes of a column tail's accumulators (one per column, A's ``mr`` rows in its lanes):
    8 when the rows fit, else 16. On AVX2 a 16-lane accumulator is two ymm registers, and
    with 5 rows its upper one held only zeros: MobileNetV2's 14x14 projections (196 = 12 x 16
    + 4 columns) ran their 4-column tail with 8 FMAs per k for 20 products, one dependent
    chain each; with 8 lanes it is 4 FMAs, half the register budget, so two accumulator sets
    (``edge_chains``). On AVX-512 an 8-lane FMA costs what a 16-lane one does."""
    return VECTOR // 2 if mr <= VECTOR // 2 else VECTOR


def _row_of(b: ir.IRBuilder, columns: list[ir.Value], r: int) -> ir.Value:
    """Row ``r`` of column accumulators (lane ``r`` of each) as one vector, column j in lane j."""
    row = ir.Constant(F32X16, ir.Undefined)
    for j, column in enumerate(columns):
        row = b.insert_element(row, b.extract_element(column, i32(r)), i32(j))
    return row


def edge_chains(count: int, accumulators: int) -> int:
    """Independent accumulator sets an edge tile of ``count`` accumulators sums k over
    (step ``u`` of an unrolled iteration into set ``u % chains``, the sets added at the end).

    With one set, a tile of one or two accumulators is one chain of dependent FMAs: a k step
    per FMA latency (4 cycles on Zen 3) instead of two FMAs per cycle. Such tiles are not
    rare in MobileNetV2: a 7x7 plane's 49th column (one vector of the 5 rows of A, against
    a 1-column broadcast of B) runs the whole depth of every row panel of its 1x1 layers,
    and 96 output channels leave a 1-row panel after 19 of 5. As many sets as a tile may
    keep live (``gemm_shape.live_accumulators`` of the file's ``accumulators`` 16-lane
    vectors), at most ``UNROLL``."""
    return max(1, min(UNROLL, live_accumulators(accumulators) // max(count, 1)))


def _k_loop(
    b: ir.IRBuilder,
    lo: ir.Value,
    hi: ir.Value,
    init: list[ir.Value],
    step: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
    unroll: int,
    whole: bool,
    chains: int = 1,
) -> list[ir.Value]:
    """``step`` for k in [lo, hi), ``unroll`` steps per iteration (the loop's own counter,
    compare and branch then come once per ``unroll`` x 24 FMAs), then the rest one by one
    unless ``whole`` says the range is always a multiple of ``unroll``. With ``chains`` (a
    divisor of ``unroll``) step ``u`` of an iteration accumulates into its own copy of
    ``init``, ``u % chains``; the copies are added together at the end."""
    if unroll == 1:
        return carried_loop(b, lo, hi, init, step)
    n = len(init)
    count = b.sdiv(b.sub(hi, lo), i64(unroll))

    def steps(i: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        base = b.add(lo, b.mul(i, i64(unroll)))
        accs = list(accs)
        for u in range(unroll):
            at = u % chains * n
            accs[at : at + n] = step(b.add(base, i64(u)), accs[at : at + n])
        return accs

    sets = carried_loop(b, i64(0), count, list(init) * chains, steps)
    accs = sets[:n]
    for c in range(1, chains):
        accs = [b.fadd(x, y) for x, y in zip(accs, sets[c * n : (c + 1) * n], strict=True)]
    if whole:
        return accs
    return carried_loop(b, b.add(lo, b.mul(count, i64(unroll))), hi, accs, step)


@dataclass(frozen=True)
class _Memory:
    """Where one result vector of C lives: a pointer and a lane mask (None: all 16)."""

    ptr: ir.Value
    mask: ir.Value | None


def _dense_columns(
    k: Kernel, g: Gemm, column: ir.Value, mask: ir.Constant | None
) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(element offset in a row of C, kept lanes, their count as a prefix mask) of the
    vector at grid ``column`` when C is stored densely: of grid columns ``j`` (rows
    ``g.dense[0]`` wide) only those with ``j % width < valid`` exist, packed without the
    others. The kept lanes are compressed together in a register and stored (or their
    partial sums loaded) as the first lanes at the offset: a compressing *store* is
    microcoded on some AVX-512 cores (Zen 4: one per tens of cycles), a register compress
    and a masked store are not. The same for every row of the tile."""
    b = k.b
    width, valid = g.dense
    y = b.udiv(column, i64(width))
    x = b.sub(column, b.mul(y, i64(width)))
    x_kept = b.select(b.icmp_unsigned("<", x, i64(valid)), x, i64(valid))
    offset = b.add(b.mul(y, i64(valid)), x_kept)
    lanes_i32 = ir.VectorType(I32, VECTOR)
    grid = b.add(_splat(b, b.trunc(column, I32)), ir.Constant(lanes_i32, list(range(VECTOR))))
    within_row = b.urem(grid, ir.Constant(lanes_i32, [width] * VECTOR))
    kept = b.icmp_unsigned("<", within_row, ir.Constant(lanes_i32, [valid] * VECTOR))
    if mask is not None:
        kept = b.and_(kept, mask)
    count = b.call(
        k.intrinsic("llvm.ctpop.i16", ir.IntType(16), [ir.IntType(16)]), [b.bitcast(kept, ir.IntType(16))]
    )
    prefix = b.icmp_unsigned("<", ir.Constant(lanes_i32, list(range(VECTOR))), _splat(b, b.zext(count, I32)))
    return offset, kept, prefix


def _compress(k: Kernel, value: ir.Value, kept: ir.Value) -> ir.Value:
    """The ``kept`` lanes of ``value`` moved to its first lanes, in order."""
    fn = k.intrinsic("llvm.experimental.vector.compress.v16f32", F32X16, [F32X16, kept.type, F32X16])
    return k.b.call(fn, [value, kept, ir.Constant(F32X16, ir.Undefined)])


def _store_tile(
    k: Kernel,
    g: Gemm,
    memory: _Memory,
    value: ir.Value,
    flags: Flags,
    where: tuple[ir.Value, ir.Value, int],
) -> None:
    """Store one result vector: added to the partial sums of earlier K blocks, and through
    the epilogue after the last block (selects, not branches: C is valid memory anyway)."""
    b = k.b
    first, last = flags
    if first is not True:
        value = b.select(first, value, b.fadd(_load(k, memory.ptr, memory.mask), value))
    if g.epilogue is not None:
        done = g.epilogue(where[0], where[1], value, where[2])
        value = done if last is True else b.select(last, done, value)
    _store(k, memory.ptr, value, memory.mask)
