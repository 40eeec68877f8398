"""The int8 kernels' static plan: their tiling constants, a layer's shapes, and which
layers they take (``keeps``: constant operands and sums that cannot leave int32).

``int8_conv.py`` emits the kernels from this plan and describes the algorithm; the backend
asks ``keeps`` at compile time, before any code is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glow_core.types import ElemKind, Type
from glow_cpu.kernels.channel_groups import ChannelGroups

LANES = 8
"""int32 lanes of one accumulator vector (a register on AVX2)."""
MR = 4
"""Output channels per micro-tile: each input pair loaded serves this many."""
NR = 2 * LANES
"""Output positions per tile (two accumulator vectors per channel)."""
PAIR = 2
"""K values one int32 lane sums per step in the pair layout (``vpmaddwd``'s int16 pairs)."""
QUAD = 4
"""K values one int32 lane sums per step in the quad layout (``vpdpbusd``'s byte quads)."""
QUAD_MR_WIDE = 8
"""Output channels per quad micro-tile where the register file is AVX-512's (``quad_mr``)."""
QUAD_MR: int | None = None
"""Output channels per quad micro-tile, when set: overrides ``quad_mr``'s choice from the
register file. A tuning knob read when a kernel is emitted (bench/int8_tiles.py ``--quads``
sets it, with the compile cache off, which does not key on it); ``None`` in the product."""
QUAD_VECTORS: int | None = None
"""Accumulator vectors of ``NR`` int32 lanes per channel in the quad micro-tile (1 or 2), when
set: overrides ``quad_vectors``'s choice from the register file. Read when a kernel is
emitted, like ``QUAD_MR``."""
QUAD_VECTORS_WIDE = 2
"""Accumulator vectors per channel of the quad tile where the register file is AVX-512's."""


def quad_mr(accumulators: int) -> int:
    """Output channels per micro-tile of the quad layout, whose channel keeps
    ``quad_vectors`` accumulators of ``NR`` int32 lanes (one zmm each on AVX-512, two ymm
    elsewhere). ``vpdpbusd`` adds into its accumulator, so successive steps of one channel
    wait on each other: more channels give the CPU more independent sums in flight. 8 where
    the kernel's register file has room (``accumulators``, in 16-lane vectors: 24 on
    AVX-512), else ``MR`` (AVX-VNNI's 16 ymm); ``QUAD_MR`` when set."""
    if QUAD_MR is not None:
        return QUAD_MR
    return QUAD_MR_WIDE if accumulators >= 2 * QUAD_MR_WIDE else MR


def quad_vectors(accumulators: int) -> int:
    """Accumulator vectors of ``NR`` lanes per channel of the quad tile: 2 on AVX-512 (8
    channels x 2 = 16 zmm accumulators; each broadcast weight quad then feeds two
    ``vpdpbusd``, and 16 independent sums cover the instruction's latency on both of the
    ports that run it), 1 on a smaller register file; ``QUAD_VECTORS`` when set.

    Measured on a 16-core Intel Xeon (emeraldrapids, AVX-512 VNNI), ``bench/int8_tiles.py
    --quads``, ResNet-50's layers, ms (docs/quantization.md): 8x2 0.53 / 0.50 / 0.79 / 0.21
    against 8x1's 0.83 / 0.80 / 1.15 / 0.29 (128@28 3x3, 256@14 3x3, 64@56 3x3, 1024->256@14
    1x1); 6x2, 10x2 and 12x2 within 5% of 8x2, 12x1 and 16x1 in between."""
    if QUAD_VECTORS is not None:
        return QUAD_VECTORS
    return QUAD_VECTORS_WIDE if accumulators >= QUAD_VECTORS_WIDE * QUAD_MR_WIDE else 1


def quad_tile_positions(accumulators: int) -> int:
    """Output positions per tile of the quad layout: ``quad_vectors`` accumulators of ``NR``."""
    vectors = quad_vectors(accumulators)
    if vectors not in (1, 2):
        raise ValueError(f"int8_shape.QUAD_VECTORS is {vectors}: the quad tile takes 1 or 2")
    return vectors * NR


def fits_int32(depth: int, input_kind: ElemKind) -> bool:
    """Whether a sum of ``depth`` products of int8 weights (|w| <= 128) and inputs cannot
    leave int32: inputs as stored (|x| <= 128, or 255 for uint8), shifted to uint8 for the
    quads (x + 128 <= 255) or centered on their zero point (|x - o| <= 255, the depthwise
    kernel's): at most 255 * 128 per product in every case. The zero-point correction and the bias
    are added in float64, outside the int32 sum."""
    del input_kind  # the centered bound covers both kinds
    return depth * 255 * 128 < 2**31


@dataclass(frozen=True)
class Geometry(ChannelGroups):
    """The convolution's static shapes (a dense layer is a 1x1 convolution on [n, k, 1, 1])."""

    n: int
    c: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    oh: int
    ow: int
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    group: int = 1
    mr: int = MR
    """Output channels per micro-tile (a panel of the packed filter)."""
    width: int = PAIR
    """K values each int32 lane sums per step of the micro-kernel: 2 (int16 pairs) or 4
    (byte quads, ``kernels/int8_dot.py``)."""
    nr: int = NR
    """Output positions per tile: ``NR`` for the pairs, ``quad_tile_positions()`` for the
    quads."""

    @property
    def depth(self) -> int:
        return self.cin_g * self.kh * self.kw

    @property
    def steps(self) -> int:
        """Steps of the micro-kernel along K (K padded with zero weights to ``width``)."""
        return -(-self.depth // self.width)

    @property
    def positions(self) -> int:
        return self.oh * self.ow

    @property
    def phase_rows(self) -> int:
        """Rows of one stride-phase plane of the padded input (``_split_phases``)."""
        return -(-(self.h + self.pads[0] + self.pads[2]) // self.strides[0])

    @property
    def grid_width(self) -> int:
        """Columns of the position grid the GEMM computes: the phase planes' width (the
        extra columns past ``ow`` are computed and dropped), the output's when pointwise."""
        if self.pointwise:
            return self.ow
        return -(-(self.w + self.pads[1] + self.pads[3]) // self.strides[1])

    @property
    def grid(self) -> int:
        """Positions of the grid the GEMM computes (``oh`` rows of ``grid_width``)."""
        return self.oh * self.grid_width

    @property
    def plane_bytes(self) -> int:
        """One channel's stride-phase planes, and the slack the last tile reads past them."""
        phases = self.strides[0] * self.strides[1]
        return phases * self.phase_rows * self.grid_width + self.nr + self.grid_width

    @property
    def tiles(self) -> int:
        return -(-self.grid // self.nr)

    @property
    def pointwise(self) -> bool:
        """A 1x1 convolution over every position: the input matrix is the input itself."""
        return (self.kh, self.kw, self.strides, self.pads) == (1, 1, (1, 1), (0, 0, 0, 0))

    @property
    def panels(self) -> int:
        return -(-self.cout_g // self.mr)


def keeps(kind: str, operands: list[Type], constant: list[bool]) -> bool:
    """Whether the int8 kernels run this integer node whole: QuantizedAdd and
    QuantizeLinear (kernels/quantize.py) always; a QuantizedConv / QuantizedFullyConnected
    with constant weights, bias and multiplier, and sums that fit int32."""
    if kind in ("QuantizedAdd", "QuantizeLinear"):
        return True  # element-wise: any operands, no sum to bound
    if kind not in ("QuantizedConv", "QuantizedFullyConnected") or not all(constant[1:]):
        return False
    w = operands[1]
    depth = int(np.prod(w.shape[1:])) if kind == "QuantizedConv" else w.shape[0]
    return fits_int32(depth, operands[0].elem)


def column_reach(shift: int, stride: int, width: int, out_width: int) -> tuple[int, int]:
    """The output columns ``[low, high)`` whose input column ``ox*stride + shift`` is in
    ``[0, width)``."""
    low = max(0, -(shift // stride) if shift < 0 else 0)
    while low * stride + shift < 0:
        low += 1
    high = out_width
    while high > low and (high - 1) * stride + shift >= width:
        high -= 1
    return low, max(low, high)
