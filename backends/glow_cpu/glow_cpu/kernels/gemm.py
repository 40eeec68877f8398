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

import collections
import dataclasses
from collections.abc import Callable

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.gemm_shape import (
    GROUP,
    L1,
    L2,
    LINE,
    PACK_PREFETCH_ROWS,
    Flags,
    Gemm,
    b_row_offset,
)
from glow_cpu.kernels.gemm_tile import tile_at
from glow_cpu.kernels.simd import lane_mask as _mask
from glow_cpu.kernels.simd import masked_load as _load
from glow_cpu.kernels.simd import prefetch
from glow_cpu.loops import F32, I32, I64, PTR, for_range, i64
from glow_cpu.registers import AVX512


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
    kc = min(g.kc, g.depth)
    counts = (n_full, n_rest, m_full, m_rest)
    packing = _packs_b(g, m_panels, k.accumulators)
    group = _panels_per_group(g, packing, m_panels, k.accumulators)
    buffer = k.private_scratch(kc * g.nr * group * 4) if packing else None

    def run_group(first: ir.Value, end: ir.Value, lo: ir.Value, hi: ir.Value, flags: Flags) -> None:
        if buffer is not None:
            _pack_b_group(k, g, (first, end, group), lo, hi, buffer, kc, (n_panels, n_full, n_rest))

        def tile(panel: ir.Value, ip: ir.Value) -> None:
            jp, tiles = _image_panel(k, g, panel, n_panels)
            if buffer is not None:
                at = b.mul(b.sub(panel, first), i64(kc * g.nr))
                start = b.gep(buffer, [b.sub(at, b.mul(lo, i64(g.nr)))], source_etype=F32)
                # The packed rows are consecutive k whatever the taps were: one tap over the
                # same depth (``outer`` keeps ``depth``, which the tile's unroll rule reads).
                tiles = dataclasses.replace(
                    tiles,
                    b=start,
                    b_panel=0,
                    b_outer=g.nr,
                    outer=g.depth,
                    taps=(0,),
                    row_table=None,
                    b_padded=True,
                )
            tile_at(k, tiles, ip, jp, lo, hi, flags, counts)

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


CACHED_B_BYTES = 2 * L2
"""Bytes of B (all images) up to which an AVX-512 product of few row panels packs one column
panel at a time: its input was just written by the layer before and is still in L2."""
ONE_PANEL_FROM_CACHE = True  # benches turn it off to compare


def _panels_per_group(g: Gemm, packing: bool, m_panels: int, accumulators: int) -> int:
    """Column panels whose B rows are packed (or visited) together: ``GROUP`` when B is
    packed at run time or A is streamed (``_streams_a``), else 1.

    One exception: an AVX-512 product of at most ``FEW_PANELS`` row panels whose whole B
    fits ``CACHED_B_BYTES`` packs one panel at a time, so its few row panels reread the
    packed panel from L1 (144 k x 48 columns: 27 KiB) rather than a group of six from L2.
    The copy then reads B from L2 in short runs (a panel's 48 columns of each row); a B
    that has to come from memory keeps the long runs of a group (MobileNetV2's 144 -> 24
    projection on 56x56 at batch 8: 1.71 -> 2.16 ms one panel at a time). At batch 1,
    inside the model, one thread (docs/performance.md): that projection 0.21-0.22 ->
    0.18-0.19 ms, the 96 -> 24 one 0.12 -> 0.10-0.11."""
    if not (packing or _streams_a(g)):
        return 1
    few = packing and m_panels <= FEW_PANELS and accumulators >= AVX512.accumulators
    if few and ONE_PANEL_FROM_CACHE and g.images * g.depth * g.n * 4 <= CACHED_B_BYTES:
        return 1
    return GROUP


def _streams_a(g: Gemm) -> bool:
    """Whether the row panels of a product whose B is packed already (a weight) should run
    over a group of column panels each, like a product that packs B at run time: when A is
    larger than half of L2, each pass of the row panels over one column panel reads A from
    L3 again (BERT's dense layers at batch 8: A is the activation, 1-4 MB, and one column
    panel after another re-read it 16-64 times); over a group, a row panel's tile of A
    stays in L1 for the group's panels and A is read once per group. A that fits in L2
    keeps one panel at a time, whose B stays in L1 (BERT at batch 1, Winograd's products)."""
    return g.b_padded and g.b_in_panels and g.m * g.depth * 4 > L2 // 2


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


def _packs_b(g: Gemm, m_panels: int, accumulators: int) -> bool:
    """Whether B's panels are copied into a contiguous per-thread buffer before the tiles.

    Read in place, B's k rows lie a whole activation plane apart (12 KiB at 56x56): every
    row of a panel is on another page, so a panel's rows miss the TLB and the prefetchers
    (which follow a few streams, not hundreds) and evict each other from L1 between the
    row panels that reuse them. Packed, a panel is one contiguous run (``nr`` floats per
    k). The copy pays off when more than one row panel reads it; B packed at compile time
    (a weight) is contiguous already.

    Where the copy costs more than it saves, B is read in place: with AVX-512's 8 x 48 tile
    for close rows, few row panels or a shallow product (``_in_place_avx512``), with a
    small register file (AVX2's 5 x 16 tile) for few row panels (``_few_readers``)."""
    if m_panels <= 1 or g.b_in_panels:
        return False
    if accumulators >= AVX512.accumulators:
        return not _in_place_avx512(g, m_panels)
    return not _few_readers(g, m_panels)


CLOSE_ROWS_PANELS = 24  # row panels up to which a B of close rows is read in place
FEW_PANELS = 4  # row panels up to which a B of far rows, or a shallow product, is read in place


def _in_place_avx512(g: Gemm, m_panels: int) -> bool:
    """Whether an AVX-512 GEMM reads B in place. Three cases:

    - a one-tap B whose rows lie close (``Gemm.b_rows_close``: a 14x14 or 7x7 activation
      plane), read by at most ``CLOSE_ROWS_PANELS`` row panels: rows that close share
      pages, and a tile's loads, one stride apart at every k, are what the core's stride
      prefetcher follows within a page;
    - a one-tap B of rows on pages of their own, read by at most ``FEW_PANELS`` row panels,
      whose rows spread over L1's sets (``_rows_spread_over_l1``): the tiles prefetch the
      next column panel as they go (``gemm_tile._prefetches_b``);
    - a product of at most ``PACK_MIN_DEPTH`` k read by at most ``FEW_PANELS`` row panels
      (MobileNetV2's first convolution, 27 k over 32 channels): the copy moves as many
      bytes as its tiles read.

    Elsewhere the copy pays: a product of many row panels reads the packed panel many
    times (MobileNetV2's 14x14 and 7x7 expansions onto 384-960 channels, 48-120 row panels:
    3-7% slower in place), and B rows a 56x56 plane apart crowd a quarter of L1's sets
    (its 96 -> 24 projection: 1.15 -> 1.22-1.28 ms in place). MobileNetV2 at batch 8, one
    thread, inside the model (docs/performance.md): its 14x14 projections 6-19% faster
    (features.8/conv3 0.64 -> 0.52 ms), the 28x28 ones 0.50-0.77 -> 0.43-0.61 ms, the first
    convolution 2.64 -> 2.32 ms."""
    if g.b_rows_close:
        return m_panels <= CLOSE_ROWS_PANELS
    if m_panels > FEW_PANELS:
        return False
    return g.depth <= PACK_MIN_DEPTH or (len(g.taps) == 1 and _rows_spread_over_l1(g))


FEW_ROW_PANELS = 8  # row panels up to which an AVX2 GEMM may read B in place
PACK_MIN_DEPTH = 32  # k steps up to which it packs B all the same (measured, see below)


def _few_readers(g: Gemm, m_panels: int) -> bool:
    """Whether B is read in place although several row panels read it: at most
    ``FEW_ROW_PANELS`` of them, a panel of a K block in place within half of L1 (so it
    stays there from one row panel to the next), and more than ``PACK_MIN_DEPTH`` k.

    The copy reads and writes all of B for each product; with 16-column tiles of 5 rows it
    is amortized over 5 x row panels FMAs per element. MobileNetV2's projections onto 24
    and 32 channels (5 and 7 row panels, K = 144-192) are 1x1 GEMMs whose B is the
    activation: single layers on AVX2, one thread, round-robin with onnxruntime in one
    process: 144 -> 24 on 56x56 0.367 -> 0.339 ms (ort 0.333), 144 -> 32 on 28x28 0.128 ->
    0.115 (0.114), 192 -> 32 on 28x28 0.175 -> 0.150 (0.148); at batch 8 9.2 -> 7.7,
    1.00 -> 0.87, 1.37 -> 1.12 ms. 32 -> 16 on 112x112 (K = 32) was 4% slower in place, and
    96 output channels (20 row panels) 6%: those keep the copy."""
    panel_bytes = min(g.kc, g.depth) * g.nr * 4
    few = m_panels <= FEW_ROW_PANELS and panel_bytes <= L1 // 2 and g.depth > PACK_MIN_DEPTH
    return few and _rows_spread_over_l1(g)


L1_WAYS = 8  # L1 data cache associativity (Zen 3/4, Intel cores since Skylake: 8 or 12)


def _rows_spread_over_l1(g: Gemm) -> bool:
    """Whether a K block's rows of B, read in place, can stay in L1 together: no L1 set gets
    them in more than half its ways (the rest for C, A and a residual, whose rows lie as far
    apart). Rows a 56x56 plane apart (12544 bytes, 256 more than 3 pages) fall into only 16
    of the 64 sets: MobileNetV2's 96 -> 24 projection on 56x56 (6 rows a set) ran 0.19 ms
    packed and 0.28 in place inside the model; on 28x28 (3136 bytes a row: every set) in
    place gained (above)."""
    sets = L1 // LINE // L1_WAYS
    offsets = [o * g.b_outer + tap for o in range(g.outer) for tap in g.taps][: g.kc]
    per_set = collections.Counter(offset * 4 // LINE % sets for offset in offsets)
    return max(per_set.values()) <= L1_WAYS // 2


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
        row = b_row_offset(b, g, kk)
        row_out = b.mul(b.sub(kk, lo), i64(g.nr))
        if PACK_PREFETCH_ROWS:
            ahead = b.add(kk, i64(PACK_PREFETCH_ROWS))
            ahead = b.select(b.icmp_signed("<", ahead, i64(g.depth)), ahead, i64(g.depth - 1))
            to_ahead = b.sub(b_row_offset(b, g, ahead), row)
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
