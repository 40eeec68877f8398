"""Convolution (NCHW, groups, strides, pads, dilations) as GEMMs specialized to its shapes.

(3x3 stride-1 convolutions with a constant filter may take Winograd, ``winograd.py``;
convolutions with more than one tap, 16 | Cin, 16 | Cout and a constant filter take the
direct blocked-channel kernel of ``conv_blocked.py`` instead; what follows is the rest.)

Per image and group, the output [Cout/g, OH*OW] is W[Cout/g, Cin/g*kh*kw] times the input
seen as a [Cin/g*kh*kw, OH*OW] matrix; the filter is packed into GEMM panels once, at compile
time. The input matrix is never built (no im2col):

- 1x1, stride 1, no padding: it *is* the input ([Cin, H*W] row-major), read in place.
- otherwise the padded input is copied once into scratch, split into stride phases
  (``Xq[c, a, e, y, x] = Xpad[c, y*sh + a, x*sw + e]``). The output is computed on the phase
  planes' width (OH x Wq positions; the Wq - OW extra columns are dropped afterwards), so
  for every filter tap the matrix row is a contiguous run of Xq at a fixed offset: the GEMM
  reads it in place (implicit GEMM, one tap per unrolled k step).

Depthwise convolutions (one input channel per group) are a direct vector kernel on the same
phase planes instead (``depthwise.py``): their GEMM would have one row; the phase planes
themselves are built in ``phase_planes.py``. Fused element-wise epilogues (bias,
residual, ReLU) are applied as the GEMM stores, or while the extra columns are dropped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from llvmlite import ir

from glow_core.types import Type
from glow_cpu.emit import VECTOR, Kernel, Tensor, emits
from glow_cpu.kernels import conv_blocked, winograd
from glow_cpu.kernels.chain import chain_loop, epilogue_pass, tile_epilogue
from glow_cpu.kernels.channel_groups import ChannelGroups
from glow_cpu.kernels.conv_depth_split import emit_depth_split, split_by_depth, two_depth_blocks
from glow_cpu.kernels.depthwise import depthwise
from glow_cpu.kernels.expand_depthwise import emit_expand_depthwise
from glow_cpu.kernels.gemm import emit_gemm
from glow_cpu.kernels.gemm_shape import KC, Gemm, tile_for
from glow_cpu.kernels.linalg import F32_ONLY
from glow_cpu.kernels.phase_planes import phase_input
from glow_cpu.loops import explicit_vector_loops, float_at, for_range, i64, row_major_strides
from glow_cpu.registers import native_compress

DENSE_MAX_BLOCKS = 6
"""K blocks up to which a phase-plane convolution stores its output compressed (measured:
5 blocks gained 5%, 9 and 18 lost 2-5% against scratch and a drop pass, both with memory
and with register compresses)."""


@dataclass(frozen=True)
class Geometry(ChannelGroups):
    """Every static size of one convolution."""

    n: int
    c: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    pads: tuple[int, int, int, int]
    dh: int
    dw: int
    group: int

    @property
    def hp(self) -> int:
        return self.h + self.pads[0] + self.pads[2]

    @property
    def wp(self) -> int:
        return self.w + self.pads[1] + self.pads[3]

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def hq(self) -> int:
        return -(-self.hp // self.sh)

    @property
    def wq(self) -> int:
        return -(-self.wp // self.sw)

    @property
    def plane_q(self) -> int:
        return self.hq * self.wq

    @property
    def phases(self) -> tuple[tuple[int, int], ...]:
        """The stride phases (row, column) some filter tap reads; only those are copied."""
        used = {
            ((i * self.dh) % self.sh, (j * self.dw) % self.sw) for i in range(self.kh) for j in range(self.kw)
        }
        return tuple(sorted(used))

    @property
    def chan(self) -> int:
        """Elements of one channel's phase planes."""
        return len(self.phases) * self.plane_q

    @property
    def phase_taps(self) -> tuple[int, ...]:
        """Element offset of each filter tap in a channel's phase planes (``phase_planes.phase_input``)."""
        slot = {phase: n for n, phase in enumerate(self.phases)}
        offsets = []
        for i in range(self.kh):
            for j in range(self.kw):
                hh, ww = i * self.dh, j * self.dw
                phase = slot[(hh % self.sh, ww % self.sw)]
                offsets.append(phase * self.plane_q + hh // self.sh * self.wq + ww // self.sw)
        return tuple(offsets)


def geometry(k: Kernel) -> Geometry:
    (n, c, h, w), (cout, _, kh, kw) = k.types[1].shape, k.types[2].shape
    _, _, oh, ow = k.types[0].shape
    return Geometry(
        n, c, h, w, cout, kh, kw, oh, ow, *k.attrs["strides"], tuple(k.attrs["pads"]),
        *k.attrs["dilations"], k.attrs["group"],
    )  # fmt: skip


@emits("Convolution", kinds=F32_ONLY)
def emit_convolution(k: Kernel) -> None:
    g = geometry(k)
    k.work = g.n * g.cout * g.oh * g.ow * g.cin_g * g.taps // VECTOR
    if k.fused.tail is not None:  # an inverted residual's depthwise layer after it
        emit_expand_depthwise(k, g)
    elif g.cin_g == 1 and g.group == g.c and g.group > 1:
        depthwise(k, g)
    else:
        # Register tiles and Winograd transforms are explicit vector code: LLVM's unroller
        # and loop vectorizer only add compile time there (loops.explicit_vector_loops).
        with explicit_vector_loops():
            _dense(k, g)
    if k.epilogue and not k.epilogue_done:
        epilogue_pass(k)


def _dense(k: Kernel, g: Geometry) -> None:
    """A convolution that is not depthwise: Winograd, the blocked direct kernel, or a GEMM."""
    if (variant := winograd.choose(g, k.values[2] is not None, k.parts, k.accumulators)) is not None:
        winograd.emit_winograd(k, g, variant)
    elif conv_blocked.applies(g, k.values[2] is not None, k.accumulators):
        conv_blocked.emit_blocked(k, g)
    elif g.kh == g.kw == 1 and g.sh == g.sw == 1 and not any(g.pads):
        _direct_gemm(k, g)
    else:
        _phased_gemm(k, g)


def _filter_panels(k: Kernel, g: Geometry) -> tuple[ir.Value, int, int, int, tuple[int, int, int]]:
    """The filter as GEMM A operand: pointer, mr, nr, elements between two groups' A, and the
    (panel, row, k) strides. A constant filter is packed once; a runtime one is read as it
    is ([Cout/g, Cin/g*kh*kw] row-major per group)."""
    mr, nr = tile_for(g.cout_g, g.oh * g.ow, packed_a=k.values[2] is not None, accumulators=k.accumulators)
    depth = g.cin_g * g.taps
    if k.values[2] is None:
        return k.sources[1].ptr, mr, nr, g.cout_g * depth, (mr * depth, depth, 1)
    packed = k.pack(2, "conv_a_panels", group=g.group, mr=mr)
    return packed, mr, nr, -(-g.cout_g // mr) * mr * depth, (depth * mr, 1, mr)


def _direct_gemm(k: Kernel, g: Geometry) -> None:
    dest, (src, _) = k.dest, k.sources
    a, mr, nr, a_group, a_strides = _filter_panels(k, g)
    p = g.h * g.w
    halves = two_depth_blocks(g)
    if halves and split_by_depth(k):  # it sets the blocks of half the depth itself
        whole = _conv_gemm(g, (a, *a_strides), mr, nr, src.ptr, p, (0,), p, False, dest.ptr, p)
        emit_depth_split(k, g, whole)
        return
    kc = g.c // 2 if halves else KC
    b = k.b
    with for_range(b, g.group, name="grp") as grp:
        x = float_at(b, src.ptr, b.mul(grp, i64(g.cin_g * p)))
        y = float_at(b, dest.ptr, b.mul(grp, i64(g.cout_g * p)))
        w = float_at(b, a, b.mul(grp, i64(a_group)))
        gemm = _conv_gemm(g, (w, *a_strides), mr, nr, x, p, (0,), p, False, y, p)
        gemm = dataclasses.replace(gemm, kc=kc)
        emit_gemm(k, _batched(k, g, gemm, grp, (g.c * p, g.cout * p)))


def _batched(k: Kernel, g: Geometry, gemm: Gemm, grp: ir.Value, strides: tuple[int, int]) -> Gemm:
    """``gemm`` over every image of the batch (one product per image sharing the filter),
    with the fused chain applied as it stores when the chain can be."""
    return dataclasses.replace(
        gemm,
        images=g.n,
        b_image=strides[0],
        c_image=strides[1],
        epilogue_for=lambda image: _output_epilogue(k, g, image, grp),
    )


def _conv_gemm(
    g: Geometry,
    a: tuple[ir.Value, int, int, int],
    mr: int,
    nr: int,
    b: ir.Value,
    n: int,
    taps: tuple[int, ...],
    b_outer: int,
    padded: bool,
    c: ir.Value,
    ldc: int,
) -> Gemm:
    depth = g.cin_g * g.taps
    return Gemm(
        m=g.cout_g,
        n=n,
        outer=g.cin_g if len(taps) > 1 else depth,
        taps=taps,
        a=a[0],
        a_panel=a[1],
        a_row=a[2],
        a_k=a[3],
        b=b,
        b_panel=nr,
        b_outer=b_outer,
        b_padded=padded,
        c=c,
        ldc=ldc,
        mr=mr,
        nr=nr,
        chained_edges=True,  # one product per layer: its tiles do not depend on the threads
    )


def _output_epilogue(k: Kernel, g: Geometry, image: ir.Value, grp: ir.Value):
    """The fused chain applied at GEMM stores straight into the output, when it can be."""
    if not k.epilogue:
        return None
    epilogue = tile_epilogue(k, k.types[0].shape, [(0, image)], 1, k.b.mul(grp, i64(g.cout_g)))
    k.epilogue_done = epilogue is not None
    return epilogue


def _phased_gemm(k: Kernel, g: Geometry) -> None:
    """Phase-split the padded input into scratch, then an implicit GEMM over the phase
    planes' width. Its extra columns are skipped as it stores (compressed stores straight
    into the output, epilogue applied) when the fused chain reads only per-channel values;
    otherwise it stores into scratch and a last pass drops them, applying the chain."""
    chan = g.chan
    grid = g.oh * g.wq
    nr = tile_for(g.cout_g, grid, packed_a=k.values[2] is not None, accumulators=k.accumulators)[1]
    taps = g.phase_taps
    # + 4 vectors: a row GEMM's last panel (up to 64 columns) reads past its row's end.
    slack = max(0, max(taps) + -(-grid // nr) * nr - chan) + 4 * VECTOR
    xq = k.shared_scratch((g.n * g.c * chan + slack) * 4)
    # A compress and a masked store (or load) cost more than plain ones; with many K blocks
    # (deep filters, small planes) the scratch and one drop pass over a small output win.
    # Without a compress instruction (AVX2) LLVM expands it lane by lane through the stack.
    direct = (
        native_compress(k.accumulators)
        and _per_channel_epilogue(k)
        and g.cin_g * g.taps <= DENSE_MAX_BLOCKS * KC
    )
    straight = not direct and (g.wq == g.ow or g.ow >= ROW_GEMM_MIN_WIDTH)
    ybuf = None if direct or straight else k.shared_scratch(g.n * g.cout * grid * 4)
    phase_input(k, g, k.shared(xq))
    k.phase()
    a, mr, nr, a_group, a_strides = _filter_panels(k, g)
    b = k.b
    if straight:
        _straight_gemm(k, g, k.shared(xq), (a, mr, nr, a_group, a_strides))
        return
    plane = g.oh * g.ow if direct else grid
    out = k.dest.ptr if direct else k.shared(ybuf)
    with for_range(b, g.group, name="grp") as grp:
        x = float_at(b, k.shared(xq), b.mul(grp, i64(g.cin_g * chan)))
        y = float_at(b, out, b.mul(grp, i64(g.cout_g * plane)))
        w = float_at(b, a, b.mul(grp, i64(a_group)))
        gemm = _conv_gemm(g, (w, *a_strides), mr, nr, x, grid, taps, chan, True, y, plane)
        if direct:
            gemm = _batched(
                k, g, dataclasses.replace(gemm, dense=(g.wq, g.ow)), grp, (g.c * chan, g.cout * plane)
            )
        else:
            gemm = dataclasses.replace(gemm, images=g.n, b_image=g.c * chan, c_image=g.cout * plane)
        emit_gemm(k, gemm)
    if direct:
        k.epilogue_done = True
        return
    k.phase()  # drop the extra columns, applying the fused chain on the way
    full = Type((g.n, g.cout, g.oh, g.wq))
    chain_loop(k, k.dest, k.epilogue, (Tensor(k.shared(ybuf), full), row_major_strides(full.shape)))
    k.epilogue_done = True


ROW_GEMM_MIN_WIDTH = 2 * VECTOR
"""Output width from which a phase-plane convolution without a compress instruction runs one
GEMM per output row (whole 16-column panels but the last) instead of one over the phase
grid stored to scratch and a pass dropping its extra columns."""


def _straight_gemm(k: Kernel, g: Geometry, xq: ir.Value, panels: tuple) -> None:
    """The implicit GEMM over the phase planes stored straight into the output, the fused
    chain applied as it stores, when there is no compress instruction (AVX2, NEON).

    When the phase grid is as wide as the output (a 1x1 stride-2 layer on an even plane),
    the grid *is* the output plane. Otherwise each output row is an image of the GEMM (B
    row ``y`` of a grid plane, C row ``y`` of the output plane: ``images`` with strides
    ``wq`` and ``ow``), so no column is computed that is not kept. The scratch and drop
    pass this replaces wrote and read the whole output once more: MobileNetV2's first
    convolution (3 -> 32, 3x3 stride 2 on 224x224) at batch 8 writes 13 MB of grid."""
    a, mr, nr, a_group, a_strides = panels
    b = k.b
    plane = g.oh * g.ow
    rows = g.wq != g.ow
    with for_range(b, g.n if rows else 1, name="img") as image, for_range(b, g.group, name="grp") as grp:
        x = float_at(b, xq, b.add(b.mul(image, i64(g.c * g.chan)), b.mul(grp, i64(g.cin_g * g.chan))))
        at = b.add(b.mul(image, i64(g.cout * plane)), b.mul(grp, i64(g.cout_g * plane)))
        y, w = float_at(b, k.dest.ptr, at), float_at(b, a, b.mul(grp, i64(a_group)))
        if rows:
            gemm = _conv_gemm(g, (w, *a_strides), mr, nr, x, g.ow, g.phase_taps, g.chan, True, y, plane)
            epilogue = _output_epilogue(k, g, image, grp)  # sets k.epilogue_done
            gemm = dataclasses.replace(
                gemm,
                images=g.oh,
                b_image=g.wq,
                c_image=g.ow,
                epilogue_for=None if epilogue is None else lambda oy: _shifted(b, epilogue, oy, g.ow),
            )
        else:
            gemm = _conv_gemm(g, (w, *a_strides), mr, nr, x, plane, g.phase_taps, g.chan, True, y, plane)
            gemm = _batched(k, g, gemm, grp, (g.c * g.chan, g.cout * plane))
        emit_gemm(k, gemm)


def _shifted(b: ir.IRBuilder, epilogue, oy: ir.Value, width: int):
    """``epilogue`` of an output plane applied to a GEMM over one of its rows (``oy``)."""
    start = b.mul(oy, i64(width))
    return lambda row, col, value, lanes: epilogue(row, b.add(start, col), value, lanes)


def _per_channel_epilogue(k: Kernel) -> bool:
    """Whether every operand the fused chain reads is constant over a channel's plane (a
    bias, a splat): then the GEMM applies it while storing, whatever the column order."""
    buffers = [a for op in k.epilogue for a in op.operands if a.kind == "buffer"]
    return all(all(s == 0 for s in a.strides[2:]) for a in buffers)
