"""A register-blocked float32 GEMM generator: C[m, n] = A[m, K] B[K, n], specialized to shapes.

The micro-kernel keeps an ``mr x nr`` tile of C in ``mr * nr/16`` zmm accumulators; each
step of k broadcasts ``mr`` values of A and loads ``nr/16`` vectors of B, then issues one
``<16 x float>`` ``llvm.fma`` per accumulator. Around it: the column panels of every image
(split between threads) in groups, whose B rows a thread packs into a contiguous buffer
per block of K; for each group, every row panel over the group's column panels.

One description covers the plain and the convolution cases. k runs as ``outer x taps``: the
address of B row ``k = o * T + t`` is ``b_panel + o * b_outer + taps[t]``. A plain matrix has
one tap; a convolution on its padded, phase-split input has one tap per filter position, so
the input is read in place (an implicit GEMM, no im2col). With taps the row offsets come from
a constant table indexed by k. A constant operand is packed into panels at compile time
(``packing.a_panels`` / ``b_panels``), zero-padded to whole panels.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.simd import fma as _fma
from glow_cpu.kernels.simd import lane_mask as _mask
from glow_cpu.kernels.simd import masked_load as _load
from glow_cpu.kernels.simd import masked_store as _store
from glow_cpu.kernels.simd import prefetch
from glow_cpu.kernels.simd import splat as _splat
from glow_cpu.loops import F32, I32, I64, PTR, carried_loop, for_range, i32, i64

LINE = 64  # bytes in a cache line
KC = 256  # k steps per block: a packed 256 x 48 panel of B is 48 KiB (L1/L2)
UNROLL = 4  # k steps per iteration of the main tile's loop
GROUP = 6  # column panels packed together: a B row is read as one run of 6 x 48 floats
PACK_PREFETCH_ROWS = 4  # the packing prefetches the B row this many k ahead
L2 = 1 << 20  # bytes of L2 per core (AVX-512 x86 cores of this generation: 1-2 MiB)
Flags = tuple[ir.Value | bool, ir.Value | bool]
Epilogue = Callable[[ir.Value, ir.Value, ir.Value, int], ir.Value]
"""Applied to each finished result vector: (row, column, vector, lanes) -> vector."""


@dataclass(frozen=True)
class Gemm:
    """Where A, B and C are and how to walk them; all strides in float elements."""

    m: int
    n: int
    outer: int
    taps: tuple[int, ...]
    a: ir.Value
    a_panel: int  # between consecutive mr-row panels of A
    a_row: int  # between rows inside a panel
    a_k: int  # between consecutive k
    b: ir.Value
    b_panel: int  # between consecutive nr-column panels of B
    b_outer: int  # between consecutive outer steps of k
    b_padded: bool  # reading a whole last panel is safe (packed or padded scratch)
    c: ir.Value
    ldc: int
    mr: int
    nr: int
    epilogue: Epilogue | None = None
    row_table: ir.Value | None = None  # i32 offset of every B row k, when there are taps
    images: int = 1
    """Independent products sharing A (the images of a batch): B and C of image ``i`` start
    ``i * b_image`` and ``i * c_image`` elements further on."""
    b_image: int = 0
    c_image: int = 0
    epilogue_for: Callable[[ir.Value], Epilogue | None] | None = None
    """With ``images``: the epilogue of one image, given its index (the caller's chain reads
    per-image operands)."""
    dense: tuple[int, int] | None = None
    """(width, valid): C's columns are a grid ``width`` wide of which only the first ``valid``
    of each row are stored, packed (``ldc`` then counts stored elements per row of C)."""

    @property
    def depth(self) -> int:
        return self.outer * len(self.taps)


def tile_for(m: int, n: int, packed_a: bool = False, accumulators: int = 24) -> tuple[int, int]:
    """(mr, nr): 8 x 48 (24 of the 32 zmm registers accumulate; per k step 8 broadcasts and
    3 loads feed 24 FMAs) in general; 12 x 32 when C has few columns (a 7x7 plane: a
    48-wide panel would be two thirds padding); rows x 64 for skinny products (a GEMV is
    bound by loading B anyway). Measured on ResNet-50 layers with B packed
    (docs/performance.md): 8 x 48 beat 12 x 32 by 5-12% and 6 x 64 by a little.

    With A packed (its rows contiguous at each k), 49 to 64 columns that end in a sliver of
    1-7 take one 8 x 64 tile: three vectors and the last columns accumulated over A's rows
    (``_column_tail``), 25 accumulators, no second panel. A 7x7 plane's 49 columns: ResNet-50's
    1x1 layers on 7x7 planes 1.07x -> 1.03x onnxruntime (two profiles each, batch 1).

    Those are AVX-512's tiles (24 accumulators); a smaller register file (``accumulators``
    from ``registers.py``) gets ``_small_file_tile``."""
    if accumulators < 24:
        return _small_file_tile(m, n, accumulators)
    if m < 4:
        return max(m, 1), 64 if n > 32 else 32
    if m < 8:
        return m, 32
    if packed_a and 48 < n <= 64 and 0 < n % VECTOR < 8:
        return 8, 64
    if n <= 64:
        return (12, 32) if m >= 12 else (m, 32)
    return 8, 48


def _small_file_tile(m: int, n: int, accumulators: int) -> tuple[int, int]:
    """(mr, nr) with at most ``accumulators`` 16-lane vectors live: one vector of columns
    by one row fewer than fit (AVX2: 5 x 16, ten ymm accumulators), or two vectors (32
    columns) for products of a few rows, whose tile has room for them.

    Not 6 x 16: twelve ymm accumulators, two of B and a broadcast fill AVX2's 16 registers
    exactly, and LLVM's scheduler loads B a k step ahead, so the tile spilled an accumulator
    to the stack every other k step. With 5 rows nothing spills; in one process, round-robin
    with onnxruntime on a loaded 2-core AVX2 machine: MobileNetV2 1.21x -> 1.01x, ResNet-50
    1.08x -> 1.03x (whole models, one thread, batch 1; single 1x1 layers of MobileNetV2 on
    14x14 and 28x28 planes 0.54 -> 0.43 and 0.38 -> 0.29 ms)."""
    if m < 4:
        rows = max(m, 1)
        return rows, VECTOR * max(1, min(2 if n > VECTOR else 1, accumulators // rows))
    return min(m, max(1, accumulators - 1)), VECTOR


def emit_gemm(k: Kernel, g: Gemm, split: bool = True) -> None:
    """The whole product into ``g.c``; with ``split`` the panels are shared among threads.

    The column panels of every image form one sequence, visited in groups: a group's B
    rows are packed together (when B is packed at run time), then every row panel runs
    over the group's column panels. Each group runs all its K blocks (its C stays in
    cache), or K blocks go outermost so each block of A is read once for all the groups
    (the images of a batch): whichever moves fewer bytes (``_blocks_outermost``).
    """
    b = k.b
    k.work = max(k.work, g.images * g.m * g.n * g.depth // VECTOR)
    n_full, n_rest = divmod(g.n, g.nr)
    m_full, m_rest = divmod(g.m, g.mr)
    n_panels, m_panels = n_full + (n_rest > 0), m_full + (m_rest > 0)
    all_panels = g.images * n_panels
    split_n = all_panels >= m_panels
    j_range = k.split(all_panels) if split and split_n else (i64(0), i64(all_panels))
    i_range = k.split(m_panels) if split and not split_n else (i64(0), i64(m_panels))
    if len(g.taps) > 1:
        g = dataclasses.replace(g, row_table=_row_table(k, g))
    kc = min(KC, g.depth)
    counts = (n_full, n_rest, m_full, m_rest)
    packing = _packs_b(g, m_panels)
    group = GROUP if packing else 1
    buffer = k.private_scratch(kc * g.nr * group * 4) if packing else None

    def run_group(first: ir.Value, end: ir.Value, lo: ir.Value, hi: ir.Value, flags: Flags) -> None:
        if buffer is not None:
            _pack_b_group(k, g, (first, end, group), lo, hi, buffer, kc, (n_panels, n_full, n_rest))

        def tile(panel: ir.Value, ip: ir.Value) -> None:
            jp, tiles = _image_panel(k, g, panel, n_panels)
            if buffer is not None:
                at = b.mul(b.sub(panel, first), i64(kc * g.nr))
                start = b.gep(buffer, [b.sub(at, b.mul(lo, i64(g.nr)))], source_etype=F32)
                tiles = dataclasses.replace(
                    tiles, b=start, b_panel=0, b_outer=g.nr, taps=(0,), row_table=None, b_padded=True
                )
            _tile_at(k, tiles, ip, jp, lo, hi, flags, counts)

        # Row panels outside the group's column panels: a tile's rows of C then continue
        # where the previous tile's ended, a few long write streams the prefetchers follow
        # instead of hundreds of short ones (and A's tile stays in L1 across the group).
        with for_range(b, i_range[1], i_range[0], name="ip") as ip, for_range(b, end, first, name="jp") as jp:
            tile(jp, ip)

    def groups(lo: ir.Value, hi: ir.Value, flags: Flags) -> None:
        with for_range(b, j_range[1], j_range[0], step=group, name="jg") as first:
            end = b.add(first, i64(group))
            end = b.select(b.icmp_signed("<", end, j_range[1]), end, j_range[1])
            run_group(first, end, lo, hi, flags)

    if g.depth <= kc:
        groups(i64(0), i64(g.depth), (True, True))
    elif _blocks_outermost(g, kc, all_panels, group, k.parts):
        _over_blocks(b, g.depth, kc, groups)
    else:
        with for_range(b, j_range[1], j_range[0], step=group, name="jg") as first:
            end = b.add(first, i64(group))
            end = b.select(b.icmp_signed("<", end, j_range[1]), end, j_range[1])
            _over_blocks(b, g.depth, kc, lambda lo, hi, flags: run_group(first, end, lo, hi, flags))


def _blocks_outermost(g: Gemm, kc: int, all_panels: int, group: int, parts: int) -> bool:
    """Whether K blocks run outside the groups, by the memory traffic each order adds.

    Groups outermost, a part reads the whole of A once per group it runs; K blocks
    outermost, it reads A once but writes and reads back its share of C once per block
    boundary (the partial sums). Counted per part (``Kernel.parts``), the unit a thread
    runs at once. Picks the order that moves fewer bytes; C that fits in L2 costs nothing
    to revisit, and A that fits is not re-read from memory either. Either order sums each
    element's K blocks in the same order, so the choice never changes a result.
    """
    a_bytes = g.m * g.depth * 4
    panels = -(-all_panels // parts)
    groups = -(-panels // group)
    blocks = -(-g.depth // kc)
    c_bytes = g.m * panels * g.nr * 4
    reread_a = 0 if a_bytes <= L2 else a_bytes * (groups - 1)
    revisit_c = 0 if c_bytes <= L2 // 2 else 2 * c_bytes * (blocks - 1)
    return revisit_c < reread_a


def _image_panel(k: Kernel, g: Gemm, panel: ir.Value, n_panels: int) -> tuple[ir.Value, Gemm]:
    """(column panel within its image, the GEMM of that image) of a panel of the sequence."""
    if g.images == 1:
        epilogue = g.epilogue_for(i64(0)) if g.epilogue_for else g.epilogue
        return panel, dataclasses.replace(g, epilogue=epilogue)
    b = k.b
    image = b.udiv(panel, i64(n_panels))
    jp = b.sub(panel, b.mul(image, i64(n_panels)))
    tiles = dataclasses.replace(
        g,
        b=b.gep(g.b, [b.mul(image, i64(g.b_image))], source_etype=F32),
        c=b.gep(g.c, [b.mul(image, i64(g.c_image))], source_etype=F32),
        epilogue=g.epilogue_for(image) if g.epilogue_for else g.epilogue,
    )
    return jp, tiles


def _over_blocks(
    b: ir.IRBuilder, depth: int, kc: int, body: Callable[[ir.Value, ir.Value, Flags], None]
) -> None:
    """``body(lo, hi, (first, last))`` for every block of ``kc`` steps of k."""
    blocks = -(-depth // kc)
    with for_range(b, blocks, name="kb") as kb:
        lo = b.mul(kb, i64(kc))
        hi = b.add(lo, i64(kc))
        hi = b.select(b.icmp_signed("<", hi, i64(depth)), hi, i64(depth))
        first, last = b.icmp_signed("==", kb, i64(0)), b.icmp_signed("==", kb, i64(blocks - 1))
        body(lo, hi, (first, last))


def _packs_b(g: Gemm, m_panels: int) -> bool:
    """Whether B's panels are copied into a contiguous per-thread buffer before the tiles.

    Read in place, B's k rows lie a whole activation plane apart (12 KiB at 56x56): every
    row of a panel is on another page, so a panel's rows miss the TLB and the prefetchers
    (which follow a few streams, not hundreds) and evict each other from L1 between the
    row panels that reuse them. Packed, a panel is one contiguous run (``nr`` floats per
    k). The copy pays off when more than one row panel reads it; B packed at compile time
    (a weight) is contiguous already.
    """
    return m_panels > 1 and not (len(g.taps) == 1 and g.b_outer == g.nr)


def _pack_b_group(
    k: Kernel,
    g: Gemm,
    panels: tuple[ir.Value, ir.Value, int],
    lo: ir.Value,
    hi: ir.Value,
    buffer: ir.Value,
    kc: int,
    counts: tuple[int, int, int],
) -> None:
    """Copy rows [lo, hi) of the column panels [first, end) of the sequence into
    ``buffer``: panel ``p`` of the group at ``p * kc * nr``, ``nr`` floats per k, the
    columns past ``n`` zero.

    Rows are the outer loop so each B row is read as one run across the group's panels of
    an image (``group * nr`` floats, a kilobyte or more): whole cache lines, one page visit.
    """
    b = k.b
    first, end, _ = panels
    n_panels, n_full, n_rest = counts
    nv = -(-g.nr // VECTOR)

    def copy(source: ir.Value, target: ir.Value, lanes: int) -> None:
        for v in range(nv):
            at = b.gep(target, [i64(v * VECTOR)], source_etype=F32)
            if v * VECTOR >= lanes:
                b.store(ir.Constant(F32X16, None), at, align=64)
                continue
            mask = None if g.b_padded else _mask(min(VECTOR, lanes - v * VECTOR))
            value = _load(k, b.gep(source, [i64(v * VECTOR)], source_etype=F32), mask)
            b.store(value, at, align=64)

    with for_range(b, hi, lo, name="pk") as kk:
        row = _b_row(b, g, kk)
        row_out = b.mul(b.sub(kk, lo), i64(g.nr))
        if PACK_PREFETCH_ROWS:
            ahead = b.add(kk, i64(PACK_PREFETCH_ROWS))
            ahead = b.select(b.icmp_signed("<", ahead, i64(g.depth)), ahead, i64(g.depth - 1))
            to_ahead = b.sub(_b_row(b, g, ahead), row)
        with for_range(b, end, first, name="pp") as panel:
            image = b.udiv(panel, i64(n_panels)) if g.images > 1 else i64(0)
            jp = b.sub(panel, b.mul(image, i64(n_panels)))
            offset = b.add(b.add(b.mul(image, i64(g.b_image)), b.mul(jp, i64(g.b_panel))), row)
            source = b.gep(g.b, [offset], source_etype=F32)
            if PACK_PREFETCH_ROWS:
                # The rows a few k ahead lie on other pages: ask for them while this one copies.
                for v in range(nv):
                    prefetch(k, b.gep(source, [b.add(to_ahead, i64(v * VECTOR))], source_etype=F32))
            slot = b.mul(b.sub(panel, first), i64(kc * g.nr))
            target = b.gep(buffer, [b.add(row_out, slot)], source_etype=F32)
            if n_rest == 0 or g.b_padded:
                copy(source, target, g.nr)
            else:
                with b.if_else(b.icmp_signed("<", jp, i64(n_full))) as (full, partial):
                    with full:
                        copy(source, target, g.nr)
                    with partial:
                        copy(source, target, n_rest)


def _b_row(b: ir.IRBuilder, g: Gemm, kk: ir.Value) -> ir.Value:
    """The element offset of B row ``kk`` from its panel's start."""
    if g.row_table is None:
        return b.add(b.mul(kk, i64(g.b_outer)), i64(g.taps[0]))
    return b.sext(b.load(b.gep(g.row_table, [kk], source_etype=I32), typ=I32), I64)


def _row_table(k: Kernel, g: Gemm) -> ir.Value:
    """A constant table of the B row offset of every k (``o * b_outer + taps[t]``): the k
    loop stays one small body instead of one copy per filter tap."""
    offsets = [o * g.b_outer + tap for o in range(g.outer) for tap in g.taps]
    table_type = ir.ArrayType(I32, len(offsets))
    table = ir.GlobalVariable(k.module, table_type, f"{k.name}.rows{len(k.module.globals)}")
    table.linkage = "internal"
    table.global_constant = True
    table.initializer = ir.Constant(table_type, [ir.Constant(I32, v) for v in offsets])
    return k.b.inttoptr(k.b.ptrtoint(table, I64), PTR)


def _tile_at(
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
    zero = ir.Constant(F32X16, None)
    a_ahead = b.gep(a_base, [i64(g.a_panel)], source_etype=F32) if _prefetches_a(g, mr) else None
    steps_per_line = max(1, LINE // (4 * mr))
    emitted = itertools.count()

    def step(kk: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        out = list(accs)
        if a_ahead is not None and next(emitted) % steps_per_line == 0:
            prefetch(k, b.gep(a_ahead, [b.mul(kk, i64(g.a_k))], source_etype=F32), locality=2)
        b_row = b.gep(b_base, [_b_row(b, g, kk)], source_etype=F32)
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
            rows = _load(k, a_col, _mask(mr))
            for j in range(tail):
                scalar = b.load(b.gep(b_row, [i64(nvec * VECTOR + j)], source_etype=F32), typ=F32)
                out[mr * nvec + j] = _fma(k, _splat(b, scalar), rows, out[mr * nvec + j])
        return out

    if g.dense is None and (mr, nr) == (g.mr, g.nr):
        _prefetch_epilogue(k, g, row0, b.mul(b.add(jp, i64(1)), i64(g.nr)), mr, nv)
    # The main tile (or a panel that is all of C's columns) unrolls its k loop; the edge
    # tiles (rare) keep one step per iteration, so the code LLVM has to optimize stays small.
    unroll = UNROLL if mr == g.mr and nr in (g.nr, g.n) else 1
    whole = g.depth % unroll == 0 and min(KC, g.depth) % unroll == 0
    accs = _k_loop(b, lo, hi, [zero] * (mr * nvec + tail), step, unroll, whole)
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


def _row_of(b: ir.IRBuilder, columns: list[ir.Value], r: int) -> ir.Value:
    """Row ``r`` of column accumulators (lane ``r`` of each) as one vector, column j in lane j."""
    row = ir.Constant(F32X16, ir.Undefined)
    for j, column in enumerate(columns):
        row = b.insert_element(row, b.extract_element(column, i32(r)), i32(j))
    return row


def _k_loop(
    b: ir.IRBuilder,
    lo: ir.Value,
    hi: ir.Value,
    init: list[ir.Value],
    step: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
    unroll: int,
    whole: bool,
) -> list[ir.Value]:
    """``step`` for k in [lo, hi), ``unroll`` steps per iteration (the loop's own counter,
    compare and branch then come once per ``unroll`` x 24 FMAs), then the rest one by one
    unless ``whole`` says the range is always a multiple of ``unroll``."""
    if unroll == 1:
        return carried_loop(b, lo, hi, init, step)
    count = b.sdiv(b.sub(hi, lo), i64(unroll))

    def steps(i: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        base = b.add(lo, b.mul(i, i64(unroll)))
        for u in range(unroll):
            accs = step(b.add(base, i64(u)), accs)
        return accs

    accs = carried_loop(b, i64(0), count, init, steps)
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
