"""Direct convolution in a blocked channel layout (NCHW16c), for the deep convolutions.

The input is copied once into scratch as ``Xb[n, c/16, hp, wp, 16]`` (padded, 16 channels
of one pixel side by side) and the filter is re-laid out once at compile time as
``Wb[og, c/16, kh, kw, 16 ic, R, 16 oc]``. A register tile holds ``R`` blocks of 16 output
channels at ``P`` output pixels: ``R * P`` vector accumulators (zmm on AVX-512; sized by
``registers.py`` for the target), each the 16 channels of one
pixel. Per input channel and filter tap it loads ``R`` filter vectors and broadcasts ``P``
input values straight from ``Xb`` (no packing at run time: a pixel's 16 channels are one
cache line, and a stride or a dilation is only a different address), then ``R * P`` FMAs.
The tile runs the whole reduction (every input channel, every tap) in registers, so the
output is written once: each block of 16 channels is transposed in registers (four rounds
of two-input shuffles) into 16 rows of ``P`` pixels and stored straight into the NCHW
output, through the fused element-wise chain.

Compared with the implicit GEMM of ``conv.py`` this computes no extra columns (the phase
planes' padding) and packs nothing per call; it needs 16 | Cin, 16 | Cout and a constant
filter, and pays a copy of the whole input, so 1x1 convolutions stay there (stride 1: read
in place; stride 2: the phase split copies only the pixels read; measured 256@56 -> 512
stride 2: 2.29 ms GEMM, 2.67 ms blocked).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.emit import F32X16, VECTOR, Kernel
from glow_cpu.kernels.chain import tile_epilogue
from glow_cpu.kernels.simd import fma, lane_mask, masked_load, prefetch, splat, vector_load, vector_store
from glow_cpu.kernels.transpose_tiles import transpose8
from glow_cpu.loops import F32, carried_loop, float_at, for_range, i64, shuffle_mask
from glow_cpu.registers import sixteen_lane_registers

if TYPE_CHECKING:  # conv.py imports this module
    from glow_cpu.kernels.conv import Geometry

BLOCKS = 2
"""16-channel output blocks per register tile (when Cout allows)."""


@dataclass(frozen=True)
class Tiling:
    """How output pixels and channels are cut into register tiles."""

    blocks: int  # R: 16-channel output blocks per tile
    rows: int  # whole output rows per tile (more than 1 only when a row is narrower than a tile)
    cols: int  # pixels of a row per tile (the last tile of a row may have fewer)

    @property
    def pixels(self) -> int:
        return self.rows * self.cols


STRIDED_GEMM_PIXELS = 49
STRIDED_GEMM_CHANNELS = 128
"""On a target whose registers hold 8 floats (AVX2), a strided layer with at least this many
output pixels per image and output channels goes to the phase-split GEMM (``conv.py``)
instead. Measured on Zen 3, 1 thread (``bench/strided_gemm_ab.py``): the GEMM took
0.86-0.92x the blocked kernel's time on the 3x3 stride-2 layers with 14x14 to 28x28 outputs
and 128-384 output channels (ResNet-50, Inception-v3; 0.94x at batch 8), 0.89-0.93x on
ResNet-50's 512 channels with a 7x7 output (0.85x inside the model, 0.90x at batch 8) and
0.97-1.02x on Inception-v3's 8x8 outputs (0.89-0.92x inside the model), but 0.99-1.23x with
96 channels on 17x17. Smaller outputs were not measured and stay blocked. On AVX-512 (a
Xeon) the blocked kernel stays: the GEMM was 1.2-1.5x slower on 7x7 and 8x8 outputs and
mixed on the larger ones (0.88-1.15x)."""


def applies(g: Geometry, constant_filter: bool, accumulators: int = 24) -> bool:
    """Whether the blocked kernel takes this convolution (``g``: ``conv.Geometry``) on a
    target whose tiles get ``accumulators`` (``registers.py``)."""
    if not (constant_filter and g.group == 1 and g.c % VECTOR == 0 and g.cout % VECTOR == 0 and g.taps > 1):
        return False
    strided = max(g.sh, g.sw) > 1
    large = g.oh * g.ow >= STRIDED_GEMM_PIXELS and g.cout >= STRIDED_GEMM_CHANNELS
    return not (strided and large and not sixteen_lane_registers(accumulators))


def tiling(g: Geometry, accumulators: int = 24) -> Tiling:
    """Two output blocks (32 channels) by up to 12 pixels of a row, balanced so a row's last
    tile is not a sliver (14 = 7 + 7, not 12 + 2); rows narrower than that are stacked whole
    while they fit, at most 16 pixels (a transposed vector). Measured on 512@7: one row of 7
    and two stacked rows (28 accumulators) both 111 GFLOP/s.

    ``accumulators``: 16-lane vectors the tile may keep live (24: AVX-512's zmm file). A
    smaller file (AVX2: 6) takes one output block, so the filter vectors loaded at each step
    fit beside the accumulators."""
    widest = BLOCKS if accumulators >= 12 else 1
    blocks = next(r for r in (widest, 2, 1) if r <= widest and (g.cout // VECTOR) % r == 0)
    budget = min(accumulators // blocks, VECTOR)  # a tile's pixels are one transposed vector
    if g.ow >= budget:
        tiles = -(-g.ow // budget)
        return Tiling(blocks, 1, -(-g.ow // tiles))
    rows = max(1, min(g.oh, accumulators // (blocks * g.ow), VECTOR // g.ow))
    return Tiling(blocks, rows, g.ow)


def transpose16(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 16 columns of the matrix whose rows are ``rows`` (at most 16 ``<16 x float>``;
    missing rows are undefined): column ``j`` has row ``i``'s lane ``j`` in lane ``i``.

    Four rounds; round ``d`` (8, 4, 2, 1) swaps the off-diagonal ``d x d`` blocks of every
    pair of rows ``i``, ``i + d`` with one two-input shuffle per row."""
    assert len(rows) <= VECTOR, f"{len(rows)} rows do not transpose into 16 lanes"
    undef = ir.Constant(F32X16, ir.Undefined)
    v = list(rows) + [undef] * (VECTOR - len(rows))
    for d in (8, 4, 2, 1):
        low = [j if j & d == 0 else VECTOR + j - d for j in range(VECTOR)]
        high = [j + d if j & d == 0 else VECTOR + j for j in range(VECTOR)]
        out = list(v)
        for i in range(VECTOR):
            if i & d:
                continue
            out[i] = b.shuffle_vector(v[i], v[i + d], shuffle_mask(low))
            out[i + d] = b.shuffle_vector(v[i], v[i + d], shuffle_mask(high))
        v = out
    return v


EIGHT_LANES = 8
"""Floats in a register of an AVX2 (or NEON pair, SSE pair) target: the 8 x 8 transposes' width."""
_F32X8 = ir.VectorType(F32, EIGHT_LANES)


def by_eights(accumulators: int) -> bool:
    """Whether the transposes between pixel vectors and channel vectors (the input's
    blocking, the output's rows; here and in Winograd) run as 8 x 8 ones: on a target whose
    tiles get ``accumulators`` and whose registers hold 8 floats (``registers.py``)."""
    return not sixteen_lane_registers(accumulators)


def channel_rows_by_eights(
    b: ir.IRBuilder,
    half: Callable[[int, int], ir.Value],
    pixels: int,
    channels: int,
    emit: Callable[[int, ir.Value], None],
) -> None:
    """``transpose16`` of ``pixels`` (at most 16) vectors of 16 channels for a target whose
    registers hold 8 floats, eight channels at a time: one or two 8 x 8 transposes (pixels
    0-7, 8-15), whose halves of a channel row are joined for ``emit``, so at most 16 ymm
    are live (AVX2: the 16 x 16 transpose with its epilogue kept 32 ymm halves live and moved
    137-158 to and from the stack in Winograd's output loop; now 6). Emitting each half
    through the epilogue apart instead spilled as little but grew the Winograd modules' IR
    by a quarter, and their LLVM time by about 40%.

    ``half(q, c0)``: pixel ``q``'s channels ``c0 .. c0 + 7`` as 8 floats. ``emit(c, value)``
    gets channel ``c``'s row: the ``pixels`` pixels in the first lanes of a 16-lane vector."""
    undefined = ir.Constant(_F32X8, ir.Undefined)
    joined = shuffle_mask(list(range(VECTOR)))
    for c0 in range(0, channels, EIGHT_LANES):
        halves = []
        for q0 in range(0, pixels, EIGHT_LANES):
            n = min(EIGHT_LANES, pixels - q0)
            halves.append(
                transpose8(b, [half(q0 + i, c0) for i in range(n)] + [undefined] * (EIGHT_LANES - n))
            )
        for c in range(min(EIGHT_LANES, channels - c0)):
            low, high = halves[0][c], halves[1][c] if len(halves) > 1 else undefined
            emit(c0 + c, b.shuffle_vector(low, high, joined))


def emit_blocked(k: Kernel, g: Geometry) -> None:
    """The whole convolution: the input blocked into scratch, then the register tiles.

    With a batch that the parts can share by whole images, the thread running a part blocks
    each of its images into a scratch of its own and runs that image's tiles at once, while the image is still
    in cache (one phase, no wait); otherwise all images are blocked first (shared scratch,
    split by rows) and the tiles follow in a second phase."""
    blocks_in = g.c // VECTOR
    image_rows = blocks_in * g.hp
    image_in = image_rows * g.wp * VECTOR
    t = tiling(g, k.accumulators)
    b = k.b
    if per_image(g, k.parts):
        weights = k.pack(2, "conv_blocked_filter", blocks=t.blocks)
        xb = k.private_scratch(image_in * 4)
        start, stop = k.split(g.n)
        with for_range(b, stop, start, name="image") as image:
            first = b.mul(image, i64(image_rows))
            _block_input(k, g, xb, first, b.add(first, i64(image_rows)), first)
            _tiles(k, g, t, xb, weights, (i64(0), i64(_units(g, t) // g.n)), image)
        return
    shared = k.shared_scratch(g.n * image_in * 4)
    if split_by_rows(g, k.parts):
        _block_input(k, g, k.shared(shared), *k.split(image_rows), i64(0), rows_first=True)
        k.phase()
        weights = k.pack(2, "conv_blocked_filter", blocks=t.blocks)
        _tiles(k, g, t, k.shared(shared), weights, k.split(_row_tiles(g, t)), rows=True)
        return
    _block_input(k, g, k.shared(shared), *k.split(g.n * image_rows), i64(0))
    k.phase()
    weights = k.pack(2, "conv_blocked_filter", blocks=t.blocks)
    _tiles(k, g, t, k.shared(shared), weights, k.split(_units(g, t)))


ROWS_SPLIT = True
"""Whether ``split_by_rows`` may cut a layer by rows (benches turn it off to compare)."""


def split_by_rows(g: Geometry, parts: int) -> bool:
    """Whether the parts of one image's layer take bands of rows (every output channel)
    rather than groups of output channels (every row): where the filter is smaller than the
    blocked input. By channels each part reads half the filter but the whole blocked input,
    half of it written by the other cores, and blocks the channels it is given of every row,
    which the layer before (a 1x1 convolution split by pixels) mostly wrote on another core;
    by rows each part reads the whole filter and only what its own core wrote, but for the
    rows' edges. ResNet-50's 128 -> 128 stride-2 layer on 56x56: a 590 KB filter, 1.7 MB of
    blocked input (docs/performance.md)."""
    if not ROWS_SPLIT or parts == 1 or g.n != 1:
        return False
    return g.cout * g.c * g.taps < g.c * g.hp * g.wp


def per_image(g: Geometry, parts: int) -> bool:
    """Whether parts take whole images (blocking and tiles together): a batch of at least
    two images that divides evenly among the parts (``Kernel.parts``), so no part is
    empty or twice the others'."""
    return g.n > 1 and g.n % parts == 0


def _row_tiles(g: Geometry, t: Tiling) -> int:
    """Rows of tiles of one image (the last may hold fewer output rows)."""
    return -(-g.oh // t.rows)


def _units(g: Geometry, t: Tiling) -> int:
    """Work units of the tile phase: (output block group, image, row of tiles)."""
    return g.cout // (VECTOR * t.blocks) * g.n * _row_tiles(g, t)


def _block_input(
    k: Kernel,
    g: Geometry,
    xb: ir.Value,
    start: ir.Value,
    stop: ir.Value,
    first: ir.Value,
    rows_first: bool = False,
) -> None:
    """Xb[n, c/16, y, x, :] = the padded input's 16 channels at (y, x), zero in the padding,
    for the rows [start, stop) of all images' (n, c/16, y) rows, row ``first`` at ``xb``; or,
    ``rows_first`` (one image), of its (y, c/16) rows: every channel block of a band of rows.
    A row is copied 16 pixels at a time: 16 channel vectors loaded, transposed into 16 pixel
    vectors, stored."""
    b = k.b
    src = k.sources[0].ptr
    plane = g.h * g.w
    row = g.wp * VECTOR
    top = g.pads[0]
    blocks = g.c // VECTOR
    with for_range(b, stop, start, name="row") as unit:
        if rows_first:
            y, block = b.udiv(unit, i64(blocks)), b.urem(unit, i64(blocks))
            at = b.add(b.mul(block, i64(g.hp)), y)
        else:
            block = b.udiv(unit, i64(g.hp))  # image * c/16 + channel block
            y = b.sub(unit, b.mul(block, i64(g.hp)))
            at = unit
        ih = b.sub(y, i64(top))
        dst = float_at(b, xb, b.mul(b.sub(at, first), i64(row)))

        def source(block: ir.Value = block, ih: ir.Value = ih) -> ir.Value:
            return float_at(b, src, b.add(b.mul(block, i64(VECTOR * plane)), b.mul(ih, i64(g.w))))

        block_row(k, g, source, dst, ih, g.wp)


def block_row(
    k: Kernel,
    g: Geometry,
    source: Callable[[], ir.Value],
    dst: ir.Value,
    ih: ir.Value,
    width: int,
    channels: int = VECTOR,
) -> None:
    """One row of a channel-blocked input: ``dst[x, :]`` = the ``channels`` (at most 16)
    channels of input row ``ih`` at column ``x - left``, zero in the padding, in the lanes
    past ``channels`` and in the whole row when ``ih`` is outside the image. ``source()``
    (called only when the row is inside) points at channel 0 of that row; channel c is
    ``c * H * W`` floats further. 16 pixels at a time: channel vectors loaded, transposed
    into pixel vectors, stored. Shared by the blocked direct convolution and Winograd."""
    b = k.b
    plane = g.h * g.w
    left = g.pads[1]
    zero = ir.Constant(F32X16, None)
    inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, i64(g.h)))
    with b.if_else(inside) as (copy, blank):
        with copy:
            for x in list(range(left)) + list(range(left + g.w, width)):
                vector_store(k, float_at(b, dst, x * VECTOR), zero)
            start = source()

            def chunk(x0: ir.Value, lanes: int) -> None:
                if by_eights(k.accumulators):
                    _chunk_by_eights(k, g, start, dst, x0, lanes, channels)
                    return
                rows = [
                    vector_load(k, float_at(b, start, b.add(x0, i64(c * plane))), lanes)
                    for c in range(channels)
                ]
                pixels = transpose16(b, rows + [zero] * (VECTOR - channels))
                for q in range(lanes):
                    at = b.mul(b.add(x0, i64(left + q)), i64(VECTOR))
                    vector_store(k, float_at(b, dst, at), pixels[q])

            full, rest = divmod(g.w, VECTOR)
            with for_range(b, full, name="cx") as cx:
                chunk(b.mul(cx, i64(VECTOR)), VECTOR)
            if rest:
                chunk(i64(full * VECTOR), rest)
        with blank, for_range(b, width, name="x") as x:
            vector_store(k, float_at(b, dst, b.mul(x, i64(VECTOR))), zero)


def _chunk_by_eights(
    k: Kernel, g: Geometry, start: ir.Value, dst: ir.Value, x0: ir.Value, lanes: int, channels: int
) -> None:
    """``block_row``'s chunk (``lanes`` pixels from column ``x0``) for a target whose
    registers hold 8 floats: four 8 x 8 transposes, each loaded, shuffled and stored before
    the next, so the live vectors fit a 16-register file (one 16 x 16 transpose of 16-lane
    vectors spilled half of them). Lanes past ``channels`` are zero."""
    b = k.b
    plane = g.h * g.w
    zero = ir.Constant(_F32X8, None)
    for half in range(-(-lanes // EIGHT_LANES)):  # 8 pixels
        pixels = min(EIGHT_LANES, lanes - half * EIGHT_LANES)
        mask = lane_mask(pixels, EIGHT_LANES)
        first = b.add(x0, i64(half * EIGHT_LANES))
        for low in range(0, VECTOR, EIGHT_LANES):  # 8 channels
            present = range(low, min(channels, low + EIGHT_LANES))
            if present:
                rows = [
                    masked_load(k, float_at(b, start, b.add(first, i64(c * plane))), mask, EIGHT_LANES)
                    for c in present
                ]
                columns = transpose8(b, rows + [zero] * (EIGHT_LANES - len(rows)))
            else:
                columns = [zero] * EIGHT_LANES
            for q in range(pixels):
                at = b.add(b.mul(b.add(first, i64(g.pads[1] + q)), i64(VECTOR)), i64(low))
                b.store(columns[q], float_at(b, dst, at), align=4)


def _lanes(b: ir.IRBuilder, vector: ir.Value, first: int) -> ir.Value:
    """Lanes ``first .. first + 7`` of a 16-lane vector (on AVX2: one of its two registers)."""
    return b.shuffle_vector(vector, vector, shuffle_mask(list(range(first, first + EIGHT_LANES))))


def _tiles(
    k: Kernel,
    g: Geometry,
    t: Tiling,
    xb: ir.Value,
    weights: ir.Value,
    units: tuple[ir.Value, ir.Value],
    image: ir.Value | None = None,
    rows: bool = False,
) -> None:
    """The register tiles of work units [start, stop): of every image, with ``xb`` holding
    all images, or of ``image`` alone, with ``xb`` holding that image; with ``rows`` (one
    image) ``units`` are rows of tiles, run for every group of output channels in turn.
    Over all images the groups go outermost when re-reading the input per group moves fewer
    bytes than re-reading the filter per image (always, at batch 1)."""
    b = k.b
    groups = g.cout // (VECTOR * t.blocks)
    row_tiles = _row_tiles(g, t)
    if rows:  # a band of rows of tiles: its rows prefetch all of the next group's lines
        band = -(-row_tiles // k.parts)
        with for_range(b, groups, name="og") as og, for_range(b, units[1], units[0], name="rt") as rt:
            ahead = _next_group_lines(k, g, t, weights, og, b.sub(rt, units[0]), band)
            _row_of_tiles(k, g, t, weights, _TileBase(i64(0), xb, og, b.mul(rt, i64(t.rows)), ahead), rt)
        return
    input_bytes = g.n * g.c * g.hp * g.wp * 4
    filter_bytes = g.cout * g.c * g.taps * 4
    groups_outer = input_bytes * (groups - 1) <= filter_bytes * (g.n - 1) or g.n == 1
    image_in = g.c * g.hp * g.wp
    with for_range(b, units[1], units[0], name="unit") as unit:
        rt = b.urem(unit, i64(row_tiles))
        rest = b.udiv(unit, i64(row_tiles))
        if image is not None:
            og, img, x_image = rest, image, xb
        else:
            if groups_outer:
                og, img = b.udiv(rest, i64(g.n)), b.urem(rest, i64(g.n))
            else:
                img, og = b.udiv(rest, i64(groups)), b.urem(rest, i64(groups))
            x_image = float_at(b, xb, b.mul(img, i64(image_in)))
        ahead = _next_group_lines(k, g, t, weights, og, rt, row_tiles)
        _row_of_tiles(k, g, t, weights, _TileBase(img, x_image, og, b.mul(rt, i64(t.rows)), ahead), rt)


def _row_of_tiles(k: Kernel, g: Geometry, t: Tiling, weights: ir.Value, at: _TileBase, rt: ir.Value) -> None:
    """Every tile of row of tiles ``rt`` (output rows from ``at.oy``) of group ``at.group``."""
    b = k.b
    full_rows, rest_rows = divmod(g.oh, t.rows)
    img = at.image
    epilogue = tile_epilogue(k, k.types[0].shape, [(0, img)], 1, i64(0)) if k.epilogue else None
    k.epilogue_done = epilogue is not None or not k.epilogue

    def row_of_tiles(rows: int) -> None:
        if rows > 1 or t.cols == g.ow:
            _tile(k, g, t, rows, g.ow, at, i64(0), weights, epilogue)
            return
        full, rest_cols = divmod(g.ow, t.cols)
        with for_range(b, full, name="tx") as tx:
            _tile(k, g, t, 1, t.cols, at, b.mul(tx, i64(t.cols)), weights, epilogue)
        if rest_cols:
            _tile(k, g, t, 1, rest_cols, at, i64(full * t.cols), weights, epilogue)

    if rest_rows == 0:
        row_of_tiles(t.rows)
    else:
        with b.if_else(b.icmp_unsigned("<", rt, i64(full_rows))) as (whole, partial):
            with whole:
                row_of_tiles(t.rows)
            with partial:
                row_of_tiles(rest_rows)


PREFETCH_LINES = 8
"""At most this many of the next group's filter lines prefetched per step of a tile."""


def _lines_per_step(t: Tiling) -> int:
    """Cache lines of filter one step of a tile reads: 16 input channels x ``blocks`` vectors."""
    return VECTOR * t.blocks


def _prefetched_per_step(t: Tiling, row_tiles: int) -> int:
    """How many of the next group's lines each step of a row of tiles prefetches: enough
    that the group's ``row_tiles`` rows of tiles together cover every line once."""
    return min(PREFETCH_LINES, -(-_lines_per_step(t) // row_tiles))


def _next_group_lines(
    k: Kernel, g: Geometry, t: Tiling, weights: ir.Value, og: ir.Value, rt: ir.Value, row_tiles: int
) -> ir.Value:
    """Where row of tiles ``rt`` of group ``og`` starts prefetching the next group's filter.

    A group's filter (``Cin * taps * 32`` floats: 295 KB at 512 channels) is read from
    memory by the group's first row of tiles, then from L2 by the others: inside a whole
    model, whose weights outgrow the L3, that first row waits on DRAM. Each row of tiles
    instead prefetches its share of the *next* group's lines into L2 (row ``rt`` takes the
    lines ``rt * P ... rt * P + P - 1`` of every step), so the filter streams in while the
    current group computes."""
    b = k.b
    per_step = _prefetched_per_step(t, row_tiles)
    group_floats = g.c * g.taps * t.blocks * VECTOR
    first_line = b.urem(b.mul(rt, i64(per_step)), i64(_lines_per_step(t)))
    return float_at(
        b, weights, b.add(b.mul(b.add(og, i64(1)), i64(group_floats)), b.mul(first_line, i64(VECTOR)))
    )


@dataclass(frozen=True)
class _TileBase:
    image: ir.Value
    x: ir.Value  # the image's blocked input
    group: ir.Value  # output block group
    oy: ir.Value  # first output row
    ahead: ir.Value  # the next group's filter lines this row of tiles prefetches


def _tile(
    k: Kernel, g: Geometry, t: Tiling, rows: int, cols: int, at: _TileBase, ox: ir.Value, weights, epilogue
) -> None:
    """``t.blocks`` x 16 output channels at ``rows`` x ``cols`` pixels from (at.oy, ox)."""
    b = k.b
    blocks_in = g.c // VECTOR
    row = g.wp * VECTOR
    pixels = rows * cols
    block_weights = g.taps * VECTOR * t.blocks * VECTOR  # one input block's filter, per group
    x_base = float_at(
        b, at.x, b.add(b.mul(b.mul(at.oy, i64(g.sh)), i64(row)), b.mul(b.mul(ox, i64(g.sw)), i64(VECTOR)))
    )
    w_base = float_at(b, weights, b.mul(at.group, i64(blocks_in * block_weights)))
    offsets = [(p // cols) * g.sh * row + (p % cols) * g.sw * VECTOR for p in range(pixels)]
    per_step = _prefetched_per_step(t, _row_tiles(g, t))

    def step(u: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
        """One input block at one filter tap (``u`` = block * taps + tap): 16 channels."""
        ib = b.udiv(u, i64(g.taps))
        tap = b.sub(u, b.mul(ib, i64(g.taps)))
        ty = b.udiv(tap, i64(g.kw))
        tx = b.sub(tap, b.mul(ty, i64(g.kw)))
        tap_at = b.add(b.mul(ty, i64(g.dh * row)), b.mul(tx, i64(g.dw * VECTOR)))
        x = float_at(b, x_base, b.add(b.mul(ib, i64(g.hp * row)), tap_at))
        w = float_at(b, w_base, b.mul(u, i64(VECTOR * t.blocks * VECTOR)))
        ahead = float_at(b, at.ahead, b.mul(u, i64(VECTOR * t.blocks * VECTOR)))
        for line in range(per_step):
            prefetch(k, float_at(b, ahead, line * VECTOR), locality=2)
        out = list(accs)
        for ic in range(VECTOR):
            filt = [vector_load(k, float_at(b, w, (ic * t.blocks + r) * VECTOR)) for r in range(t.blocks)]
            for p, offset in enumerate(offsets):
                value = splat(b, b.load(float_at(b, x, offset + ic), typ=F32))
                for r in range(t.blocks):
                    out[r * pixels + p] = fma(k, filt[r], value, out[r * pixels + p])
        return out

    zero = ir.Constant(F32X16, None)
    accs = carried_loop(b, i64(0), i64(blocks_in * g.taps), [zero] * (t.blocks * pixels), step)
    column = b.add(b.mul(at.oy, i64(g.ow)), ox)
    plane = g.oh * g.ow
    out_image = float_at(b, k.dest.ptr, b.mul(at.image, i64(g.cout * plane)))
    for r in range(t.blocks):
        block = accs[r * pixels : (r + 1) * pixels]
        by_sixteen = None if by_eights(k.accumulators) else transpose16(b, block)
        first = b.mul(b.add(b.mul(at.group, i64(t.blocks)), i64(r)), i64(VECTOR))

        def store(lane: int, value: ir.Value, first: ir.Value = first) -> None:
            oc = b.add(first, i64(lane))
            if epilogue is not None:
                value = epilogue(oc, column, value, pixels)
            vector_store(k, float_at(b, out_image, b.add(b.mul(oc, i64(plane)), column)), value, pixels)

        if by_sixteen is not None:
            for lane, value in enumerate(by_sixteen):
                store(lane, value)
        else:
            halves = lambda q, c0, block=block: _lanes(b, block[q], c0)  # noqa: E731
            channel_rows_by_eights(b, halves, pixels, VECTOR, store)
