"""Winograd convolution (F(2x2,3x3), F(4x4,3x3)) for 3x3 stride-1 layers with a constant filter.

The transforms and the accuracy rule are in ``glow_cpu/winograd_transforms.py``; this is the
kernel. The filter transform ``U = G g G^T`` runs once at compile time, as a packer
(``winograd_filter``): per transformed position, ``U^T`` [Cin, Cout] in the GEMM's B panels.
The generated code never sees the weights' values.

Work is cut into units of (image, a few rows of tiles, a range of output channels), run by
whichever thread claims them (on planes small enough, a unit takes several whole images:
``Plan.images``), each in its own private scratch so a unit's data stays in cache
from the first step to the last. Where an image has too few tiles to give every thread rows
of its own (the 14x14 and 7x7 planes of ResNet-50's last stages, at batch 1), the output
channels are split instead (``Plan.cout_parts``): a unit that owns few tiles still reads the
whole transformed filter (16 MB for 512 channels at F(2x2)), so two threads each taking half
the tiles each read it all and ran slower than one thread; each taking half the channels reads
half of it. For F(4x4), steps 1-2 then run once, in a phase of their own split by (rows,
input channel block), into a transformed input shared by the parts (``_emit_shared_input``):
done by every part, they were about 15% of a part's vector instructions at 128 channels, two
parts. F(2x2)'s cheaper transform each part still does itself (``shares_input``): reading
the other cores' share of it cost more.

1. **Block**: the unit's input rows (its tiles' rows plus the 2-row halo, zero outside the
   image and past the last channel) copied as ``Xb[c/16, row, x, 16]``: 16 channels of one
   pixel are one vector (16 channel rows loaded, transposed in registers).
2. **Input transform**: for each tile and block of 16 channels, ``alpha**2`` vector loads,
   ``V = B^T d B`` with vector adds and FMAs (16 channels at once), stored as
   ``V[position, tile, channel]``: per position a row-major [tiles, Cin] matrix.
3. **Products**: per position the GEMM ``M = V U^T`` [tiles, Cout] with the register-blocked
   micro-kernel of ``gemm.py`` (tiles sized by the target's register file), A broadcast
   from V, B the packed transformed filter.
4. **Output transform**: per block of 16 output channels and run of tiles covering 16 output
   columns, ``Y = A^T M A`` per tile (16 channels at once), each output row's 16 pixel vectors
   transposed into 16 channel rows and stored into the NCHW output through the fused
   element-wise chain (bias, residual, ReLU), the edge masked.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.chain import tile_epilogue
from glow_cpu.kernels.conv_blocked import (
    EIGHT_LANES,
    block_row,
    by_eights,
    channel_rows_by_eights,
    transpose16,
)
from glow_cpu.kernels.gemm import emit_gemm
from glow_cpu.kernels.gemm_shape import Gemm, tile_for
from glow_cpu.kernels.simd import fma, masked_load, vector_store
from glow_cpu.loops import F32, float_at, for_range, i64, set_within, vector_constant
from glow_cpu.registers import sixteen_lane_registers
from glow_cpu.winograd_transforms import FILTER, VARIANTS, Variant, accurate_enough

if TYPE_CHECKING:  # conv.py imports this module
    from glow_cpu.kernels.conv import Geometry

_ENABLED = contextvars.ContextVar("glow_cpu_winograd", default=True)


def enabled(on: bool) -> AbstractContextManager[None]:
    """Within the block, convolutions may (``on``) or may not take Winograd: the backend
    sets it from ``CpuOptions.winograd`` around building one program."""
    return set_within(_ENABLED, on)


# ---- which layers, which variant -------------------------------------------------------

F4_MIN_OUTPUT = 14
"""F(4x4) needs output planes at least this tall and wide (measured, docs/performance.md),
or a batch that gives a unit ``F4_MIN_UNIT_TILES`` tiles of smaller ones."""
F4_MIN_UNIT_TILES = 16
"""F(4x4) tiles a unit of whole images (``Plan.images``) must gather for F(4x4) on a plane
under ``F4_MIN_OUTPUT``: a 7x7 plane has 4 such tiles, and a unit reads the whole 37 MB
transformed filter of 512 channels. Measured on Zen 3, 512 -> 512 on 7x7, F(4x4) / F(2x2)
time, one thread: batch 8 (32 tiles a unit) 0.72x, batch 4 (16) 0.93x, batch 2 (8) 1.05x;
two threads at batch 8, one unit whose channels they split, 0.69x (docs/performance.md)."""
F4_MIN_CHANNELS = 64
F2_MIN_CHANNELS = 32
"""Input and output channels a variant needs to beat the direct kernels (measured)."""


def eligible(g: Geometry, constant_filter: bool) -> bool:
    """Whether Winograd can compute this convolution at all: a constant 3x3 filter, stride
    1, no dilation, one group."""
    return (
        constant_filter
        and (g.kh, g.kw) == (FILTER, FILTER)
        and (g.sh, g.sw) == (1, 1)
        and (g.dh, g.dw) == (1, 1)
        and g.group == 1
    )


def preferred(g: Geometry, parts: int = 1, accumulators: int = 24) -> tuple[int, ...]:
    """The variants (output tile sizes) worth trying for this layer on ``parts`` threads of a
    target whose tiles get ``accumulators`` (``registers.py``), best first, by the measured
    rule: F(4x4) for planes of at least 14x14 with 64+ channels in and out, or smaller planes
    whose batch gives a unit ``F4_MIN_UNIT_TILES`` tiles of smaller ones; F(2x2) for 32+
    channels. On a target with 16-lane registers (AVX-512), only those estimated faster than
    the direct kernel, cheapest first (``relative_cost``); the rest stay direct."""
    channels = min(g.c, g.cout)
    order = []
    if channels >= F4_MIN_CHANNELS and (
        min(g.oh, g.ow) >= F4_MIN_OUTPUT or _batched_f4_tiles(g, parts) >= F4_MIN_UNIT_TILES
    ):
        order.append(4)
    if channels >= F2_MIN_CHANNELS:
        order.append(2)
    if not sixteen_lane_registers(accumulators):
        return tuple(order)
    costs = {m: relative_cost(g, VARIANTS[m], parts, accumulators) for m in order}
    return tuple(sorted((m for m in order if costs[m] < 1.0), key=costs.__getitem__))


def choose(g: Geometry, constant_filter: bool, parts: int = 1, accumulators: int = 24) -> Variant | None:
    """The Winograd variant this convolution takes on ``parts`` threads of a target whose
    tiles get ``accumulators``, or None (direct convolution): the first preferred variant
    whose estimated error over ``g.c`` channels is within the conformance tolerance. Depends
    on the shape, the parts and the register file only (kernels are shared by shape)."""
    if not _ENABLED.get() or not eligible(g, constant_filter):
        return None
    for m in preferred(g, parts, accumulators):
        if accurate_enough(m, g.c):
            return VARIANTS[m]
    return None


STREAMED_FLOPS_PER_BYTE = 16
"""FLOPs the direct kernel computes on AVX-512 in the time one core streams a byte of a
weight from memory, inside a model (measured on an Intel Xeon, docs/performance.md: a
Winograd unit of 16 tiles, whose products are bound by that stream, took 1.26 ms for
Inception-v3's 11 MB F(2x2) filter of 448 -> 384 channels and 1.6 ms for ResNet-50's 16.8
MB one of 512 -> 512, against 1.4 and 1.5 ms for the direct kernel's 198 and 231 MFLOP)."""


def relative_cost(g: Geometry, variant: Variant, parts: int, accumulators: int = 24) -> float:
    """Winograd's estimated time for this layer over the direct kernel's, on a 16-lane target.

    Every unit (``plan``) streams the whole transformed filter (its output-channel parts a
    share each) and computes its products, ``2 * alpha**2`` FLOPs per tile per filter
    element; it takes the longer of the two, the stream costing ``STREAMED_FLOPS_PER_BYTE``
    per byte. A small filter (``SMALL_FILTER``) stays in cache from one unit to the next and
    costs its products only. The direct kernel computes ``2 * 9`` FLOPs per output pixel per
    filter element. The transforms are left out. Inside the models this ranks as measured:
    ResNet-50's 512 -> 512 layers on 7x7 at batch 1 (16 F(2x2) tiles a unit, 1.16: direct),
    Inception-v3's 448 -> 384 on 8x8 (0.89: F(2x2)), ResNet-50's 256 -> 256 on 14x14
    (F(4x4) 0.65, F(2x2) 0.44: F(2x2), 0.79 ms against 1.05 and 1.33 direct)."""
    p = plan(g, variant, parts, accumulators)
    units = g.n // p.images * p.chunks  # each with all its output-channel parts
    stream = 0 if g.c * g.cout <= SMALL_FILTER else 4 * STREAMED_FLOPS_PER_BYTE
    winograd = units * variant.alpha**2 * max(stream, 2 * p.tiles)
    direct = 2 * FILTER * FILTER * g.n * g.oh * g.ow
    return winograd / direct


def _batched_f4_tiles(g: Geometry, parts: int) -> int:
    """F(4x4) tiles of a unit of whole images (``Plan.images``) on a plane with few tiles."""
    tiles = -(-g.oh // 4) * -(-g.ow // 4)
    if tiles > UNIT_TILES:
        return 0
    return _whole_images(g, tiles, parts)[0] * tiles


# ---- the kernel ------------------------------------------------------------------------

UNIT_TILES = 64
"""Tiles a unit aims at: enough GEMM rows that the transformed filter (read once per unit)
is amortized, few enough that the unit's V and M stay within L2/L3."""

SMALL_FILTER = 128 * 256
"""Input x output channels up to which a layer's units are sized to compute no rows of tiles
past the image rather than to be as large as ``UNIT_TILES`` allows: a smaller unit rereads
the transformed filter more often, cheap while it is small. Measured on Zen 3, 1 thread, in
the models (thread CPU time, per-instruction medians; docs/performance.md): ResNet-50's
64-channel 56x56 layers 9-10% faster with 7 units of 2 rows than 3 of 5, Inception-v3's 35x35
layers (64 and 96 channels) 3-15% with 3 rows than 5, VGG-19's 112x112 and 128-channel 56x56
layers faster, its 256 x 256 channel 56x56 layers 3-6% slower."""


@dataclass(frozen=True)
class Plan:
    """How one convolution's tiles are cut into units and where a unit's data lives."""

    m: int  # output tile
    alpha: int  # input tile
    tiles_y: int
    tiles_x: int
    rows: int  # rows of tiles per unit
    chunks: int  # units per image along the rows of tiles
    cin_blocks: int
    cout_blocks: int
    mr: int  # the products' register tile
    nr: int
    cout_parts: int = 1  # units per (image, chunk) along the output channels
    part_cols: int = 0  # output channels of a part (a multiple of ``nr``; the last has the rest)
    images: int = 1  # whole images a unit takes (more than 1 only where ``chunks`` is 1)

    @property
    def image_tiles(self) -> int:
        """Tiles of one image in a unit."""
        return self.rows * self.tiles_x

    @property
    def tiles(self) -> int:
        """Tiles of one unit (GEMM rows), of all its images."""
        return self.images * self.image_tiles

    @property
    def span(self) -> int:
        """Input rows a unit blocks."""
        return self.rows * self.m + FILTER - 1

    @property
    def width(self) -> int:
        """Pixels of a blocked row: whole tiles plus the halo (past the padding: zeros)."""
        return self.tiles_x * self.m + FILTER - 1

    @property
    def cin_padded(self) -> int:
        return self.cin_blocks * VECTOR

    @property
    def cout_padded(self) -> int:
        return self.cout_blocks * VECTOR

    @property
    def units(self) -> int:
        """Units of one image (of one group of ``images`` images)."""
        return self.chunks * self.cout_parts

    def all_units(self, batch: int) -> int:
        """Units of the whole batch."""
        return batch // self.images * self.units


def plan(g: Geometry, variant: Variant, parts: int, accumulators: int = 24) -> Plan:
    """Units of whole rows of tiles, at most about ``UNIT_TILES`` tiles each, balanced so the
    last unit of an image is not a sliver; for a small filter (``SMALL_FILTER``) the rows that
    compute the fewest past the image, and with a few units a part the fewest for the busiest
    part (``_fewest_rows_computed``). Where that gives fewer units than parts
    (``Kernel.parts``), the output channels are split into parts first (each reads its share
    of the filter), and the rows only where the channels cannot be (under 32 of them)."""
    m = variant.m
    tiles_y, tiles_x = -(-g.oh // m), -(-g.ow // m)
    largest = max(1, min(tiles_y, -(-UNIT_TILES // tiles_x)))  # rows of tiles a unit may take
    small_filter = g.c * g.cout <= SMALL_FILTER
    rows = _fewest_rows_computed(g.n, tiles_y, tiles_x, largest, 1) if small_filter else largest
    chunks = -(-tiles_y // rows)
    cout_parts = 1
    if g.n * chunks < parts:
        cout_parts = min(-(-parts // (g.n * chunks)), g.cout // VECTOR)
        if cout_parts < 2:
            cout_parts = 1
            chunks = min(tiles_y, max(chunks, -(-parts // g.n)))
    elif g.n * chunks < 4 * parts and small_filter and parts > 1:
        # a few units: the rows that give the busiest part the fewest (Inception-v3's 9 rows
        # of 35x35 on 2 threads: 2 units of 5, not 3 of 3, which give one part 6)
        chunks = -(-tiles_y // _fewest_rows_computed(g.n, tiles_y, tiles_x, largest, parts))
    elif g.n * chunks < 4 * parts:
        # a few units: as many for every part (3 units on 2 threads kept one idle a third of the time)
        while (g.n * chunks) % parts and chunks < tiles_y:
            chunks += 1
    rows = -(-tiles_y // chunks)
    chunks = -(-tiles_y // rows)
    images = 1
    if chunks == 1 and cout_parts == 1:
        images, split = _whole_images(g, rows * tiles_x, parts)
        if split:
            cout_parts = parts
    part_n = -(-g.cout // cout_parts)
    columns = part_n if cout_parts > 1 else g.cout
    mr, nr = tile_for(images * rows * tiles_x, columns, accumulators=accumulators)
    part_cols = 0
    if cout_parts > 1:
        if part_n % nr and nr > 2 * VECTOR and part_n % (2 * VECTOR) == 0:
            # whole panels of 32 split evenly where 48 would not (256 -> 144 + 112)
            mr, nr = tile_for(images * rows * tiles_x, 2 * VECTOR, accumulators=accumulators)
        part_cols = -(-part_n // nr) * nr
        cout_parts = -(-g.cout // part_cols)
    cout_blocks = -(-g.cout // VECTOR)
    return Plan(m, variant.alpha, tiles_y, tiles_x, rows, chunks, -(-g.c // VECTOR), cout_blocks, mr, nr,
                cout_parts, part_cols, images)  # fmt: skip


def _whole_images(g: Geometry, image_tiles: int, parts: int) -> tuple[int, bool]:
    """(images a unit takes, whether the parts split its output channels) where a unit takes
    whole images of ``image_tiles`` tiles: the one rule ``plan`` and the F(4x4) choice read."""
    if _batch_split_by_channels(g, image_tiles, parts):
        return g.n, True
    return _images_per_unit(g.n, image_tiles, parts), False


def _images_per_unit(batch: int, image_tiles: int, parts: int) -> int:
    """Whole images per unit where one image has few tiles: the most that divide the batch,
    keep the unit within ``UNIT_TILES`` tiles and leave every part as many units. A unit
    reads the whole transformed filter, so ResNet-50's 14x14 and 7x7 layers at batch 8, 16
    tiles an image, read their 9-17 MB filter once per image with one image a unit and once
    per four with four (docs/performance.md)."""
    fits = [
        d
        for d in range(1, batch + 1)
        if batch % d == 0 and d * image_tiles <= UNIT_TILES and (batch // d) % parts == 0
    ]
    return max(fits, default=1)


BATCH_SPLIT_BY_CHANNELS = True
"""On several threads, a batch whose images all fit one unit (``UNIT_TILES``) is one unit
of rows whose output channels the parts split, as a single image's are (each part reads its
share of the filter once), rather than units of fewer images that each read all of it."""


def _batch_split_by_channels(g: Geometry, image_tiles: int, parts: int) -> bool:
    """Whether ``plan`` takes the whole batch as one unit of rows split by output channels."""
    return (
        BATCH_SPLIT_BY_CHANNELS
        and parts > 1
        and g.n > 1
        and g.n * image_tiles <= UNIT_TILES
        and g.cout // VECTOR >= parts
    )


def _fewest_rows_computed(images: int, tiles_y: int, tiles_x: int, largest: int, parts: int) -> int:
    """Rows of tiles per unit (at most ``largest``) for which the part given the most units
    computes the fewest rows; then the fewest rows computed in all (a unit computes all its
    rows, past the image too), then the largest unit. With one part: the fewest rows past
    the image (ResNet-50's 14 rows of 56x56: 7 units of 2 rows, not 3 of 5).

    Units under a quarter of ``UNIT_TILES`` tiles are taken only where they give the busiest
    part fewer rows than any larger unit. On several parts ResNet-50's 14 rows of 56x56 then
    run as 14 units of one row (7 rows a part) instead of 7 of two (8 rows for one part, 6
    for the other, which waited): on an Intel Xeon, 2 threads, each part on its own core
    (``claims.py``), inside the model (docs/performance.md) 0.387 -> 0.324, 0.374 -> 0.341,
    0.342 -> 0.317 ms and in the other compile order 0.360 -> 0.314, 0.364 -> 0.318, 0.334 ->
    0.296 ms, whole runs 1.1% and 1.3% faster. On Zen 3, with parts claimed from one
    counter, one-row units had been the slower (not measured since): re-measure there.
    Where smaller units only tie (Inception-v3's 9 rows of 35x35 on 2 parts: 5 rows for the
    busiest part either way) the larger units stay."""

    def cost(rows: int) -> tuple[int, int, int]:
        units = images * -(-tiles_y // rows)
        return -(-units // parts) * rows, units * rows, -rows

    sizes = range(1, largest + 1)
    candidates = [r for r in sizes if r * tiles_x >= UNIT_TILES // 4] or [largest]
    best = min(candidates, key=cost)
    if parts > 1:
        small = min(sizes, key=cost)
        if cost(small)[0] < cost(best)[0]:
            return small
    return best


def emit_winograd(k: Kernel, g: Geometry, variant: Variant) -> None:
    """The whole convolution, one phase: every unit blocked, transformed, multiplied and
    transformed back by the thread that claims it (a unit of output-channel part ``q``
    transforms the whole input of its rows itself, ``shares_input`` aside)."""
    p = plan(g, variant, k.parts, k.accumulators)
    k.work = g.n * p.chunks * p.image_tiles * variant.positions * g.c * g.cout // VECTOR
    if shares_input(p, variant):
        _emit_shared_input(k, g, p, variant)
        return
    weights = k.pack(2, "winograd_filter", m=p.m, nr=p.nr, cin_padded=p.cin_padded)
    xb_floats = p.cin_blocks * p.span * p.width * VECTOR  # one image's blocked rows
    xb = k.private_scratch(p.images * xb_floats * 4)
    v = k.private_scratch(variant.positions * p.tiles * p.cin_padded * 4)
    products = k.private_scratch(variant.positions * p.tiles * p.cout_padded * 4)
    rows = k.private_scratch(p.m * VECTOR * VECTOR * 4)  # a run of output tiles (_output_transform)
    b = k.b
    start, stop = k.split(p.all_units(g.n))
    with for_range(b, stop, start, name="unit") as unit:
        part = b.urem(unit, i64(p.cout_parts))
        image, first_tile_row = _unit_rows(b, p, b.udiv(unit, i64(p.cout_parts)))

        def block_and_transform(image: ir.Value, slot: ir.Value | None) -> None:
            image_xb = xb if slot is None else float_at(b, xb, b.mul(slot, i64(xb_floats)))
            _block_input(k, g, p, image_xb, image, first_tile_row)
            _input_transform(k, p, variant, (image_xb, v), Scopes(k.module), image_slot=slot)

        _each_image(k, p, image, block_and_transform)
        where = (image, first_tile_row, part)
        # the same scopes again (the module keeps one node per distinct metadata)
        scopes = Scopes(k.module)
        _multiply_and_transform_back(k, g, p, variant, (v, weights, products, rows), where, scopes)


PRIVATE_F2_INPUT = True
"""Whether F(2x2) units split by output channels transform their input themselves
(``shares_input``); benches turn it off to compare."""


def shares_input(p: Plan, variant: Variant) -> bool:
    """Whether the parts splitting a unit's output channels share one transformed input
    (``_emit_shared_input``: transformed once, in a phase of its own) rather than each
    transforming the unit's whole input itself, in one phase.

    Sharing saves a part the transform of the other parts' channels and costs it reading
    the transform the other cores wrote, which comes slowly from their caches. F(2x2)'s
    transform is cheap and four times the size of its input (F(4x4)'s 2.25 times), so its
    parts transform privately: on an Intel Xeon, 2 threads, six 256 -> 256 layers on 14x14
    in a chain 0.474 -> 0.445 and 0.486 -> 0.448 ms a layer (both compile orders), ResNet-50
    0.4-0.6% faster in all (docs/performance.md). For F(4x4) it was a wash (128 -> 128 on
    28x28: 0.550 shared, 0.548 private, 2026-11-26) and a shared one has one transform to
    do, so it stays. A unit of several images (a batch split by channels) shares: each part
    would transform every image."""
    if p.cout_parts == 1:
        return False
    return not (PRIVATE_F2_INPUT and variant.m == 2 and p.images == 1)


def _each_image(
    k: Kernel, p: Plan, first_image: ir.Value, body: Callable[[ir.Value, ir.Value | None], None]
) -> None:
    """``body(image, slot)`` for each image of a unit: ``slot`` its index in the unit (None
    where a unit has one image, whose code is then emitted without the loop)."""
    if p.images == 1:
        body(first_image, None)
        return
    with for_range(k.b, p.images, name="img") as slot:
        body(k.b.add(first_image, slot), slot)


def _tile_in_unit(b: ir.IRBuilder, p: Plan, tile: ir.Value, slot: ir.Value | None) -> ir.Value:
    """The unit's GEMM row of an image's tile ``tile``: after the earlier images' tiles."""
    return tile if slot is None else b.add(b.mul(slot, i64(p.image_tiles)), tile)


def _emit_shared_input(k: Kernel, g: Geometry, p: Plan, variant: Variant) -> None:
    """Output channels split into parts (``Plan.cout_parts``): two phases. First every unit
    of rows is blocked and transformed once, one input channel block per work item, into
    ``V`` in shared scratch; then each (unit of rows, part) multiplies that ``V`` by its
    share of the filter and transforms its channels back, as in the one-phase kernel."""
    b = k.b
    v_floats = variant.positions * p.tiles * p.cin_padded  # one unit of rows' V
    v_handle = k.shared_scratch(g.n // p.images * p.chunks * v_floats * 4)
    xb = k.private_scratch(p.span * p.width * VECTOR * 4)  # one channel block
    shared_v = k.shared(v_handle)
    start, stop = k.split(g.n * p.chunks * p.cin_blocks)
    with for_range(b, stop, start, name="item") as item:
        cb = b.urem(item, i64(p.cin_blocks))
        rest = b.udiv(item, i64(p.cin_blocks))  # image * chunks + chunk
        if p.images == 1:
            image, first_tile_row = _unit_rows(b, p, rest)
            unit, slot = rest, None
        else:  # then chunks is 1: rest is the image, V the one of its unit
            image, first_tile_row = rest, i64(0)
            unit, slot = b.udiv(rest, i64(p.images)), b.urem(rest, i64(p.images))
        blocks = (cb, b.add(cb, i64(1)))
        _block_input(k, g, p, xb, image, first_tile_row, blocks)
        v = float_at(b, shared_v, b.mul(unit, i64(v_floats)))
        _input_transform(k, p, variant, (xb, v), Scopes(k.module), blocks, image_slot=slot)
    k.phase()
    b = k.b  # the new phase's function
    weights = k.pack(2, "winograd_filter", m=p.m, nr=p.nr, cin_padded=p.cin_padded)
    products = k.private_scratch(variant.positions * p.tiles * p.cout_padded * 4)
    rows = k.private_scratch(p.m * VECTOR * VECTOR * 4)
    shared_v = k.shared(v_handle)
    start, stop = k.split(p.all_units(g.n))
    with for_range(b, stop, start, name="unit") as unit:
        part = b.urem(unit, i64(p.cout_parts))
        rest = b.udiv(unit, i64(p.cout_parts))
        image, first_tile_row = _unit_rows(b, p, rest)
        v = float_at(b, shared_v, b.mul(rest, i64(v_floats)))
        where = (image, first_tile_row, part)
        _multiply_and_transform_back(k, g, p, variant, (v, weights, products, rows), where, Scopes(k.module))


def _unit_rows(b: ir.IRBuilder, p: Plan, rows_unit: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(first image, first row of tiles) of unit of rows ``rows_unit`` (image * chunks +
    chunk, or the group of ``images`` images where a unit takes several)."""
    if p.images > 1:  # then chunks is 1
        return b.mul(rows_unit, i64(p.images)), i64(0)
    return b.udiv(rows_unit, i64(p.chunks)), b.mul(b.urem(rows_unit, i64(p.chunks)), i64(p.rows))


def _multiply_and_transform_back(
    k: Kernel,
    g: Geometry,
    p: Plan,
    variant: Variant,
    buffers: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    where: tuple[ir.Value, ir.Value, ir.Value],
    scopes: Scopes,
) -> None:
    """Steps 3 and 4 of one unit: its part's products from ``V``, then the output transform
    through the fused epilogue. ``buffers``: V, the packed filter, products, output rows;
    ``where``: image, first row of tiles, part."""
    v, weights, products, rows = buffers
    _products(k, g, p, variant, (v, weights, products), where[2])

    def transform_back(image: ir.Value, slot: ir.Value | None) -> None:
        epilogue = tile_epilogue(k, k.types[0].shape, [(0, image)], 1, i64(0)) if k.epilogue else None
        k.epilogue_done = epilogue is not None or not k.epilogue
        image_where = (image, where[1], where[2])
        _output_transform(k, g, p, variant, (products, rows, scopes), image_where, epilogue, slot)

    _each_image(k, p, where[0], transform_back)


def _clamped(
    b: ir.IRBuilder, lo: int, hi: int, blocks: tuple[ir.Value, ir.Value] | None
) -> tuple[ir.Value, ir.Value]:
    """``[lo, hi)`` of a static run of channel blocks, cut to ``blocks`` when given."""
    if blocks is None:
        return i64(lo), i64(hi)
    first, end = blocks
    return (
        b.select(b.icmp_signed(">", first, i64(lo)), first, i64(lo)),
        b.select(b.icmp_signed("<", end, i64(hi)), end, i64(hi)),
    )


def _channel_blocks(count: int, channels: int) -> list[tuple[int, int, int]]:
    """(channels in the block, first block, end block): the whole 16-channel blocks, then a
    last partial one, each emitted once (a static channel count)."""
    whole, rest = divmod(channels, VECTOR)
    runs = [(VECTOR, 0, whole), (rest, whole, whole + 1)]
    return [(lanes, lo, hi) for lanes, lo, hi in runs if lanes and hi > lo and hi <= count]


SCRATCH = ("xb", "v", "products", "rows")
"""A unit's private scratch buffers (``emit_winograd``): disjoint regions of one pointer."""


class Scopes:
    """Scoped no-alias metadata saying the unit's scratch buffers never overlap.

    They are all carved from the one private-scratch pointer, so without it LLVM must treat
    every load of one as possibly depending on every store to another: its loop-access
    analysis (run for loop-load elimination on every innermost loop) compared the input
    transform's 36 loads with its 36 stores pairwise, and the output transform's, about a
    third of an F(4x4) module's LLVM time (docs/performance.md). Each access through
    ``load``/``store`` names its buffer's scope and the others as ones it does not alias.
    """

    def __init__(self, module: ir.Module):
        # Named by strings, so the same in every kernel: within any one function the claim
        # holds (a phase function is one kernel's, never inlined into another's).
        domain = module.add_metadata([ir.MetaDataString(module, "glow.winograd")])
        self.scopes = {
            buffer: module.add_metadata([ir.MetaDataString(module, f"glow.winograd.{buffer}"), domain])
            for buffer in SCRATCH
        }
        self.own = {buffer: module.add_metadata([scope]) for buffer, scope in self.scopes.items()}
        self.others = {
            buffer: module.add_metadata([s for b, s in self.scopes.items() if b != buffer])
            for buffer in SCRATCH
        }

    def tag(self, instr: ir.Instruction, buffer: str) -> ir.Instruction:
        instr.set_metadata("alias.scope", self.own[buffer])
        instr.set_metadata("noalias", self.others[buffer])
        return instr

    def load(self, k: Kernel, buffer: str, ptr: ir.Value, width: int = VECTOR) -> ir.Value:
        """``width`` (16 unless told) floats of scratch ``buffer`` at ``ptr``."""
        return self.tag(masked_load(k, ptr, None, width), buffer)

    def store(self, k: Kernel, buffer: str, ptr: ir.Value, value: ir.Value) -> None:
        """16 floats to scratch ``buffer`` at ``ptr``."""
        self.tag(vector_store(k, ptr, value), buffer)


def _block_input(
    k: Kernel,
    g: Geometry,
    p: Plan,
    xb: ir.Value,
    image: ir.Value,
    first_tile_row: ir.Value,
    blocks: tuple[ir.Value, ir.Value] | None = None,
) -> None:
    """Xb[cb, r, x, :] = the padded input's channels cb*16.. at row ``first_tile_row * m + r``
    and column ``x`` (zero outside the image and past the last channel), for every channel
    block or the ``[first, end)`` of ``blocks`` (block ``first`` at ``xb``)."""
    b = k.b
    src = k.sources[0].ptr
    plane = g.h * g.w
    row_floats = p.width * VECTOR
    top = g.pads[0]
    first_row = b.sub(b.mul(first_tile_row, i64(p.m)), i64(top))
    base = blocks[0] if blocks is not None else i64(0)
    for channels, lo, hi in _channel_blocks(p.cin_blocks, g.c):
        start, stop = _clamped(b, lo, hi, blocks)
        with for_range(b, stop, start, name="cb") as cb, for_range(b, p.span, name="r") as r:
            ih = b.add(first_row, r)
            slot = b.sub(cb, base) if blocks is not None else cb
            dst = float_at(b, xb, b.mul(b.add(b.mul(slot, i64(p.span)), r), i64(row_floats)))

            def source(cb: ir.Value = cb, ih: ir.Value = ih) -> ir.Value:
                channel0 = b.add(b.mul(image, i64(g.c)), b.mul(cb, i64(VECTOR)))
                return float_at(b, src, b.add(b.mul(channel0, i64(plane)), b.mul(ih, i64(g.w))))

            block_row(k, g, source, dst, ih, p.width, channels)


def _combine(k: Kernel, coefficients: Sequence[float], vectors: Sequence[ir.Value]) -> ir.Value:
    """sum(c * v) over the non-zero coefficients: adds and subtracts for +-1, FMAs else."""
    b = k.b
    acc = None
    for c, vector in zip(coefficients, vectors, strict=True):
        if c == 0:
            continue
        if acc is None:
            acc = vector if c == 1 else b.fmul(vector_constant(F32, (float(c),) * VECTOR), vector)
        elif c == 1:
            acc = b.fadd(acc, vector)
        elif c == -1:
            acc = b.fsub(acc, vector)
        else:
            acc = fma(k, vector_constant(F32, (float(c),) * VECTOR), vector, acc)
    return acc if acc is not None else ir.Constant(F32X16, None)


def _sandwich(k: Kernel, left: Sequence[Sequence[float]], tile: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """``L tile L^T`` for a square tile of vectors: columns first, then rows."""
    half = [
        [_combine(k, row, [tile[i][j] for i in range(len(tile))]) for j in range(len(tile[0]))]
        for row in left
    ]
    return [[_combine(k, row, half[r]) for row in left] for r in range(len(left))]


def _input_transform(
    k: Kernel,
    p: Plan,
    variant: Variant,
    buffers: tuple[ir.Value, ir.Value],
    scopes: Scopes,
    blocks: tuple[ir.Value, ir.Value] | None = None,
    image_slot: ir.Value | None = None,
) -> None:
    """V[position, tile, cb*16:] = B^T d B for every tile of an image of the unit (its
    ``image_slot``-th: ``_each_image``) and channel block, or the blocks ``[first, end)`` (``Xb``
    then holds block ``first`` first: ``_block_input``)."""
    b = k.b
    xb, v = buffers
    row_floats = p.width * VECTOR
    plane = p.tiles * p.cin_padded
    start, stop = blocks if blocks is not None else (i64(0), i64(p.cin_blocks))
    with (
        for_range(b, stop, start, name="cb") as cb,
        for_range(b, p.rows, name="ty") as ty,
        for_range(b, p.tiles_x, name="tx") as tx,
    ):
        slot = b.sub(cb, start) if blocks is not None else cb
        rows = b.add(b.mul(slot, i64(p.span)), b.mul(ty, i64(p.m)))
        base = float_at(b, xb, b.add(b.mul(rows, i64(row_floats)), b.mul(tx, i64(p.m * VECTOR))))
        d = [
            [scopes.load(k, "xb", float_at(b, base, i * row_floats + j * VECTOR)) for j in range(p.alpha)]
            for i in range(p.alpha)
        ]
        transformed = _sandwich(k, variant.bt, d)
        tile = _tile_in_unit(b, p, b.add(b.mul(ty, i64(p.tiles_x)), tx), image_slot)
        out = float_at(b, v, b.add(b.mul(tile, i64(p.cin_padded)), b.mul(cb, i64(VECTOR))))
        for i in range(p.alpha):
            for j in range(p.alpha):
                scopes.store(k, "v", float_at(b, out, (i * p.alpha + j) * plane), transformed[i][j])


def _products(
    k: Kernel,
    g: Geometry,
    p: Plan,
    variant: Variant,
    buffers: tuple[ir.Value, ir.Value, ir.Value],
    part: ir.Value,
) -> None:
    """Per position, M [tiles, part's Cout] = V [tiles, Cin] x U^T [Cin, part's Cout] on this
    thread. A part's columns start on a panel boundary of the packed filter, so its B is the
    filter's panels from there on; the last part, when narrower, gets a product of its own
    width."""
    b = k.b
    v, weights, products = buffers
    filter_floats = -(-g.cout // p.nr) * p.cin_padded * p.nr
    width = p.part_cols if p.cout_parts > 1 else g.cout
    last = g.cout - (p.cout_parts - 1) * width

    def product(pos: ir.Value, n: int) -> None:
        column = b.mul(part, i64(width))
        gemm = Gemm(
            m=p.tiles,
            n=n,
            outer=g.c,
            taps=(0,),
            a=float_at(b, v, b.mul(pos, i64(p.tiles * p.cin_padded))),
            a_panel=p.mr * p.cin_padded,
            a_row=p.cin_padded,
            a_k=1,
            b=float_at(b, weights, b.add(b.mul(pos, i64(filter_floats)), b.mul(column, i64(p.cin_padded)))),
            b_panel=p.cin_padded * p.nr,
            b_outer=p.nr,
            b_padded=True,
            c=float_at(b, products, b.add(b.mul(pos, i64(p.tiles * p.cout_padded)), column)),
            ldc=p.cout_padded,
            mr=p.mr,
            nr=p.nr,
        )
        emit_gemm(k, gemm, split=False)

    with for_range(b, variant.positions, name="pos") as pos:
        if last == width:
            product(pos, width)
        else:
            with b.if_else(b.icmp_unsigned("<", part, i64(p.cout_parts - 1))) as (whole, rest):
                with whole:
                    product(pos, width)
                with rest:
                    product(pos, last)


def _output_transform(
    k: Kernel,
    g: Geometry,
    p: Plan,
    variant: Variant,
    buffers: tuple[ir.Value, ir.Value, Scopes],
    where: tuple[ir.Value, ir.Value, ir.Value],
    epilogue,
    image_slot: ir.Value | None = None,
) -> None:
    """Y = A^T M A per tile of image ``where[0]`` (the unit's ``image_slot``-th), 16 output
    channels at once, stored row by row (16 columns)."""
    b = k.b
    products, rows, scopes = buffers
    image, first_tile_row, part = where
    per_chunk = VECTOR // p.m  # tiles whose columns make one 16-pixel output run
    full, rest = divmod(g.ow, VECTOR)
    plane = g.oh * g.ow
    out_image = float_at(b, k.dest.ptr, b.mul(image, i64(g.cout * plane)))
    position_floats = p.tiles * p.cout_padded

    def run(
        ob: ir.Value, channels: int, ty: ir.Value, first_tile: ir.Value, tiles: int, columns: int
    ) -> None:
        """``tiles`` tiles from ``first_tile`` of row ``ty``: output columns ``columns``.
        Each tile's Y goes to ``rows`` ([output row, column of the run, 16 channels]), then
        each output row is transposed and stored: two small loop bodies, not ``tiles``
        unrolled transforms (which took LLVM seconds to compile)."""
        with for_range(b, tiles, name="t") as t:
            tile = _tile_in_unit(b, p, b.add(b.mul(ty, i64(p.tiles_x)), b.add(first_tile, t)), image_slot)
            base = float_at(b, products, b.add(b.mul(tile, i64(p.cout_padded)), b.mul(ob, i64(VECTOR))))
            m_tile = [
                [
                    scopes.load(k, "products", float_at(b, base, (i * p.alpha + j) * position_floats))
                    for j in range(p.alpha)
                ]
                for i in range(p.alpha)
            ]
            y = _sandwich(k, variant.at, m_tile)
            column0 = b.mul(t, i64(p.m))
            for r in range(p.m):
                for x in range(p.m):
                    at = b.mul(b.add(i64(r * VECTOR + x), column0), i64(VECTOR))
                    scopes.store(k, "rows", float_at(b, rows, at), y[r][x])
        ox = b.mul(first_tile, i64(p.m))
        with for_range(b, p.m, name="yr") as r:
            oy = b.add(b.mul(b.add(first_tile_row, ty), i64(p.m)), r)
            with b.if_then(b.icmp_signed("<", oy, i64(g.oh))):
                column = b.add(b.mul(oy, i64(g.ow)), ox)
                run_row = float_at(b, rows, b.mul(r, i64(VECTOR * VECTOR)))

                def store(lane: int, value: ir.Value, column: ir.Value = column) -> None:
                    oc = b.add(b.mul(ob, i64(VECTOR)), i64(lane))
                    if epilogue is not None:
                        value = epilogue(oc, column, value, columns)
                    at = b.add(b.mul(oc, i64(plane)), column)
                    vector_store(k, float_at(b, out_image, at), value, columns)

                if not by_eights(k.accumulators):
                    pixels = [
                        scopes.load(k, "rows", float_at(b, run_row, q * VECTOR)) for q in range(columns)
                    ]
                    for lane, value in enumerate(transpose16(b, pixels)[:channels]):
                        store(lane, value)
                else:

                    def half(q: int, c0: int, run_row: ir.Value = run_row) -> ir.Value:
                        return scopes.load(k, "rows", float_at(b, run_row, q * VECTOR + c0), EIGHT_LANES)

                    channel_rows_by_eights(b, half, columns, channels, store)

    part_blocks = p.part_cols // VECTOR
    for channels, lo, hi in _channel_blocks(p.cout_blocks, g.cout):
        if p.cout_parts > 1:  # this part's blocks of the run
            first = b.mul(part, i64(part_blocks))
            lo, hi = _clamped(b, lo, hi, (first, b.add(first, i64(part_blocks))))
        with for_range(b, hi, lo, name="ob") as ob, for_range(b, p.rows, name="ty") as ty:
            with for_range(b, full, name="xc") as xc:
                run(ob, channels, ty, b.mul(xc, i64(per_chunk)), per_chunk, VECTOR)
            if rest:
                run(ob, channels, ty, i64(full * per_chunk), -(-rest // p.m), rest)
