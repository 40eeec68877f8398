"""What one GEMM is (``Gemm``: where A, B and C are and how to walk them), the constants of
its blocking, and which register tile it gets (``tile_for``): read by the driver
(``gemm.py``), the micro-kernel (``gemm_tile.py``) and the kernels that describe their work
as a GEMM (convolution, MatMul, Winograd).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_cpu.emit import VECTOR
from glow_cpu.loops import I32, I64, i64

LINE = 64  # bytes in a cache line
KC = 256  # k steps per block: a packed 256 x 48 panel of B is 48 KiB (L1/L2)
UNROLL = 4  # k steps per iteration of the main tile's loop
GROUP = 6  # column panels packed together: a B row is read as one run of 6 x 48 floats
PACK_PREFETCH_ROWS = 4  # the packing prefetches the B row this many k ahead
L1 = 32 << 10  # bytes of L1 data cache per core (x86 cores of this decade: 32-48 KiB)
L2 = 1 << 20  # bytes of L2 per core (AVX-512 x86 cores of this generation: 1-2 MiB)
CLOSE_ROWS_BYTES = 1024  # B rows read in place at most this far apart share pages (4+ a page)
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

    kc: int = KC
    """k steps per block: a block sums in registers from zero, then adds to C (the first
    stores), so an element's sum is its blocks' sums added in order. A product that may be
    cut by depth between threads (``conv_depth_split``) takes blocks of half its depth, at
    every thread count, so the cut keeps that order."""

    chained_edges: bool = False
    """Whether edge tiles may sum k over independent accumulator sets (``gemm_tile.edge_chains``),
    which changes their rounding against a main tile's: only for a product whose tiles are
    fixed by its shapes alone. Winograd cuts its products into units by the part count, so
    there an element's tile, and with sets its sum, would depend on the threads (results
    are bit-equal for every part count: test_cpu_parts.py)."""

    @property
    def depth(self) -> int:
        return self.outer * len(self.taps)

    @property
    def b_in_panels(self) -> bool:
        """Whether B is laid out in column panels already (each panel's k rows consecutive
        runs of ``nr``): a weight packed at compile time, or a product one panel wide."""
        return len(self.taps) == 1 and self.b_outer == self.nr

    @property
    def b_rows_close(self) -> bool:
        """Whether B has one tap and its consecutive k rows lie within ``CLOSE_ROWS_BYTES``
        (four or more to a page: a 14x14 or 7x7 plane read in place)."""
        return len(self.taps) == 1 and self.b_outer * 4 <= CLOSE_ROWS_BYTES

    @property
    def b_far_rows_in_place(self) -> bool:
        """Whether B is read in place (one tap, column panels side by side) with its rows
        not close (``b_rows_close``): each row of a panel on a page of its own."""
        return len(self.taps) == 1 and self.b_panel == self.nr != self.b_outer and not self.b_rows_close


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
    return min(m, live_accumulators(accumulators)), VECTOR


def live_accumulators(accumulators: int) -> int:
    """16-lane accumulators a tile may keep live across its k loop, main or edge tile: all
    ``accumulators`` of a large file, one fewer on a small one (``_small_file_tile``: with
    six, LLVM loading B a k step ahead ran out of ymm registers and spilled). An edge tile's
    accumulator sets (``gemm_tile.edge_chains``) count against the same budget: MobileNetV2's
    first convolution (32 = 6 x 5 + 2 rows) ran its 2-row tile with three sets, twelve ymm
    accumulators, and spilled seven vectors per unrolled iteration."""
    return accumulators if accumulators >= 24 else max(1, accumulators - 1)


def b_row_offset(b: ir.IRBuilder, g: Gemm, kk: ir.Value) -> ir.Value:
    """The element offset of B row ``kk`` from its panel's start."""
    if g.row_table is None:
        return b.add(b.mul(kk, i64(g.b_outer)), i64(g.taps[0]))
    return b.sext(b.load(b.gep(g.row_table, [kk], source_etype=I32), typ=I32), I64)
