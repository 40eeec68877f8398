"""An inverted residual's expansion and depthwise convolution as one kernel: the expanded
tensor never reaches memory.

MobileNet-style blocks widen a thin feature map with a 1x1 convolution (16 -> 96 channels
on 112x112: a 4.8 MB result), then run a 3x3 depthwise convolution over it. Apart, the
1x1 layer writes that tensor and the depthwise layer reads it back; inside a model, whose
weights and activations outgrow the caches between two inferences, each of those writes
first fetches its lines from DRAM. Measured on Zen 3 (one thread, per-instruction profile):
the 112x112 pair took 1.10 + 0.43 ms inside MobileNetV2 against 0.54 + 0.23 ms with its
data in cache, and the same pair alone took the model's times once a 48 MB sweep ran
between calls (docs/performance.md, "Inverted residuals in one kernel").

Here the expansion is computed a few input rows at a time into a ring of rows in the
thread's private scratch (``Ring``: the last rows of every expanded channel, 130 KB for
that layer's 96 channels, which stays in L2), through the 1x1 layer's own fused chain
(bias, ReLU6) at the GEMM's stores, and each output row of the depthwise layer is computed
from the ring as soon as its three input rows are there, through the depthwise layer's
chain, straight into its destination. Rows are expanded in aligned groups of
``Ring.rows_per_group`` (one row on the planes fused by default; several on narrower ones,
so a product keeps ``GROUP_COLUMNS`` columns); a part of the work is an image's band of
output rows, whose first group may recompute a row or two of the band above.

Only planes at least ``MIN_WIDTH`` wide are fused: on narrower ones the ring's row kernel
loses to the depthwise layer's plane kernels apart by more than the saved traffic.

The fusion is decided on the IR (``fusion.plan_fusion`` asks ``fusable``); what is computed
and its rounding does not depend on the threads (a row's group is fixed by the plane).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_core.ir.instructions import Instr, Value
from glow_core.types import ElemKind
from glow_cpu.chain_ops import Op
from glow_cpu.emit import F32X16, VECTOR, Kernel, Tail, Tensor
from glow_cpu.kernels.chain import chain_loop, tile_epilogue
from glow_cpu.kernels.depthwise import PAIRS_SWAPPED, chunks, filter_row, output_row, stride2_windows
from glow_cpu.kernels.gemm import emit_gemm
from glow_cpu.kernels.gemm_shape import Gemm, tile_for
from glow_cpu.kernels.simd import splat, vector_store
from glow_cpu.loops import (
    F32,
    I64,
    explicit_vector_loops,
    float_at,
    for_range,
    i64,
    row_major_strides,
    set_within,
    shuffle_mask,
)

if TYPE_CHECKING:
    from glow_cpu.kernels.conv import Geometry

_ENABLED: ContextVar[bool] = ContextVar("glow_cpu_expand_depthwise", default=True)


def enabled(on: bool) -> AbstractContextManager[None]:
    """Within the block, such pairs may (``on``) or may not be fused: the backend sets it from
    ``CpuOptions.fuse_depthwise`` around building one program."""
    return set_within(_ENABLED, on)


MIN_WIDTH = 112
"""Planes at least this wide are fused. Measured on Zen 3 (single pairs, fused / apart):
0.72-0.97 on 112-wide planes, 1.10-1.16 on 64- and 80-wide ones and 1.04-1.55 on 56- and
28-wide ones, where the depthwise layer's plane kernels apart (``depthwise_flat``, the
stride-2 row carry) cost a third to half less than the ring's rows (docs/performance.md)."""

GROUP_COLUMNS = 64
"""The fewest columns an expansion product of a group of rows has, where the height allows
(a 16-wide panel is the tile's width; four keep the tile's edges a small share)."""


def fusable(
    expand: Instr, depthwise: Instr, expand_chain: list[Op], has_constant: Callable[[Value], bool]
) -> bool:
    """Whether ``depthwise`` (reading the end of ``expand``'s chain) runs inside ``expand``'s
    kernel: a float32 1x1 stride-1 convolution with a constant filter whose chain reads only
    per-channel values, then a float32 3x3 depthwise convolution with one output channel per
    input channel, padding 1, stride 1 or 2, a constant filter and a plane at least
    ``MIN_WIDTH`` wide. ``has_constant(value)``: whether a value is a constant weight."""
    if not _ENABLED.get() or expand.kind != "Convolution" or depthwise.kind != "Convolution":
        return False
    if any(i.predicate is not None for i in (expand, depthwise)):
        return False
    if any(i.dest.type.elem is not ElemKind.float32 for i in (expand, depthwise)):
        return False
    if len(expand.sources) != 2 or len(depthwise.sources) != 2:
        return False
    x, w1 = expand.sources
    t, w2 = depthwise.sources
    if not (has_constant(w1) and has_constant(w2)) or x.type.rank != 4:
        return False
    a, d = expand.attrs, depthwise.attrs
    n, c, h, w = x.type.shape
    cout = w1.type.shape[0]
    if w1.type.shape[1:] != (c, 1, 1) or a["group"] != 1 or any(a["pads"]):
        return False
    if tuple(a["strides"]) != (1, 1) or tuple(a["dilations"]) != (1, 1):
        return False
    if t.type.shape != (n, cout, h, w) or w2.type.shape != (cout, 1, 3, 3) or d["group"] != cout:
        return False
    stride = tuple(d["strides"])
    if stride not in ((1, 1), (2, 2)) or tuple(d["pads"]) != (1, 1, 1, 1) or tuple(d["dilations"]) != (1, 1):
        return False
    if w < MIN_WIDTH:
        return False
    # The expansion's chain is applied to rows of the ring: it may read the running value,
    # constants and per-channel buffers (a bias), nothing that varies along the plane.
    for op in expand_chain:
        for access in op.operands:
            if access.kind == "buffer" and any(s != 0 for s in access.strides[2:]):
                return False
    return True


@dataclass(frozen=True)
class Ring:
    """The last expanded rows of one image, every channel: ``[channel, slot, column]``.

    Rows are expanded in aligned groups of ``rows_per_group`` (the smallest divisor of the
    height giving at least ``GROUP_COLUMNS`` columns); row ``r`` lives in slot ``r`` modulo
    the ring's ``slots``. A 3x3 window needs the row above its first, so the ring keeps two
    groups (three rows when groups are single rows), or the whole plane when one group is.
    """

    channels: int
    height: int
    width: int
    rows_per_group: int

    @staticmethod
    def of(channels: int, height: int, width: int) -> Ring:
        wanted = -(-GROUP_COLUMNS // width)
        rows = next(r for r in range(1, height + 1) if height % r == 0 and r >= min(wanted, height))
        return Ring(channels, height, width, rows)

    @property
    def groups_kept(self) -> int:
        if self.rows_per_group == self.height:
            return 1
        return 2 if self.rows_per_group >= 2 else 3

    @property
    def slots(self) -> int:
        return self.groups_kept * self.rows_per_group

    @property
    def channel_floats(self) -> int:
        return self.slots * self.width

    @property
    def nbytes(self) -> int:
        return self.channels * self.channel_floats * 4

    def slot_of(self, b: ir.IRBuilder, row: ir.Value) -> ir.Value:
        """The slot of (expanded) row ``row``."""
        g = self.rows_per_group
        if self.groups_kept == 1:
            return row
        group = b.urem(b.udiv(row, i64(g)), i64(self.groups_kept))
        return b.add(b.mul(group, i64(g)), b.urem(row, i64(g)))


def emit_expand_depthwise(k: Kernel, g: Geometry) -> None:
    """The expansion ``g`` (``k``'s own instruction) and the depthwise convolution of
    ``k.fused.tail`` into ``k.dest``; see the module docstring."""
    tail = k.fused.tail
    assert tail is not None
    d = tail.instr
    stride = d.attrs["strides"][0]
    _, _, oh, ow = d.dest.type.shape
    dw = _depthwise_geometry(g, oh, ow, stride)
    fused_chain = (
        bool(tail.epilogue)
        and tile_epilogue(k, d.dest.type.shape, [(0, i64(0))], 1, i64(0), ops=tail.epilogue) is not None
    )
    _emit_ring(k, g, dw, tail, fused_chain)
    k.epilogue_done = True
    if tail.epilogue and not fused_chain:  # the depthwise layer's chain as a pass of its own
        k.phase()
        dest = Tensor(k.dest.ptr, d.dest.type, None)
        chain_loop(k, dest, tail.epilogue, (dest, row_major_strides(d.dest.type.shape)))


def _emit_ring(k: Kernel, g: Geometry, dw: Geometry, tail: Tail, fused_chain: bool) -> None:
    """A plane at least ``MIN_WIDTH`` wide: the expanded rows in a ring (the module docstring)."""
    d = tail.instr
    stride, oh, ow = dw.sh, dw.oh, dw.ow
    ring = Ring.of(g.cout, g.h, g.w)
    k.work = g.n * g.cout * (g.h * g.w * g.c + oh * ow * 9) // VECTOR
    b = k.b
    mr, nr = tile_for(g.cout, ring.rows_per_group * g.w, packed_a=True, accumulators=k.accumulators)
    panels = k.pack(2, "conv_a_panels", group=1, mr=mr)
    rows_buffer = k.private_scratch(ring.nbytes)
    # Rows above and below the image read a row of zeros (as wide as a stride-2 window spans).
    zero_floats = -(-(g.w * stride + 2 * VECTOR) // VECTOR) * VECTOR
    zero_row = k.private_scratch(zero_floats * 4)
    for x in range(0, zero_floats, VECTOR):
        b.store(ir.Constant(F32X16, None), float_at(b, zero_row, x), align=4)
    # Stride 2: each channel's share of its next output row from their common input row.
    carry_floats = -(-ow // VECTOR) * VECTOR
    carry = k.private_scratch(g.cout * carry_floats * 4) if stride == 2 else None
    rows = _Rows(dw, ring, rows_buffer, zero_row, carry, carry_floats)

    blocks = max(1, min(oh, -(-k.parts // g.n))) if k.parts > 1 else 1
    start, stop = k.split(g.n * blocks)
    next_row = k.alloca(I64)  # the unit's first output row not computed yet
    with for_range(b, stop, start, name="unit") as unit:
        image = b.udiv(unit, i64(blocks))
        block = b.urem(unit, i64(blocks))
        y_first = b.udiv(b.mul(block, i64(oh)), i64(blocks))
        y_end = b.udiv(b.mul(b.add(block, i64(1)), i64(oh)), i64(blocks))
        b.store(y_first, next_row)
        first_in = _larger(b, b.sub(b.mul(y_first, i64(stride)), i64(1)), i64(0))
        last_in = _smaller(b, b.add(b.mul(b.sub(y_end, i64(1)), i64(stride)), i64(1)), i64(g.h - 1))
        group_first = b.udiv(first_in, i64(ring.rows_per_group))
        group_end = b.add(b.udiv(last_in, i64(ring.rows_per_group)), i64(1))
        x_image = float_at(b, k.sources[0].ptr, b.mul(image, i64(g.c * g.h * g.w)))
        expand_chain = tile_epilogue(k, _expanded_shape(g), [(0, image)], 1, i64(0)) if k.epilogue else None
        assert expand_chain is not None or not k.epilogue, "fusable admits per-channel chains only"
        chain = (
            tile_epilogue(k, d.dest.type.shape, [(0, image)], 1, i64(0), ops=tail.epilogue)
            if fused_chain
            else None
        )
        out_image = float_at(b, k.dest.ptr, b.mul(image, i64(g.cout * oh * ow)))
        with for_range(b, group_end, group_first, name="group") as group:
            first_row = b.mul(group, i64(ring.rows_per_group))
            product = Gemm(
                m=g.cout,
                n=ring.rows_per_group * g.w,
                outer=g.c,
                taps=(0,),
                a=panels,
                a_panel=g.c * mr,
                a_row=1,
                a_k=mr,
                b=float_at(b, x_image, b.mul(first_row, i64(g.w))),
                b_panel=nr,
                b_outer=g.h * g.w,
                b_padded=False,
                c=float_at(b, rows_buffer, b.mul(ring.slot_of(b, first_row), i64(g.w))),
                ldc=ring.channel_floats,
                mr=mr,
                nr=nr,
                epilogue=expand_chain,
                chained_edges=True,  # a row's group is fixed by the plane, not by the parts
            )
            with explicit_vector_loops():
                emit_gemm(k, product, split=False)
            # The output rows whose three input rows are in now: y with y * stride + 1 <= the
            # last row expanded (and all the rest once the image's last row is).
            last_row = b.add(first_row, i64(ring.rows_per_group - 1))
            ready = b.udiv(b.add(last_row, i64(stride - 1)), i64(stride))
            at_end = b.icmp_signed(">=", last_row, i64(g.h - 1))
            upto = b.select(at_end, y_end, _smaller(b, ready, y_end))
            y_from = b.load(next_row)
            rows.emit(k, d, (y_from, upto, y_first), out_image, chain)
            b.store(_larger(b, upto, y_from), next_row)


@dataclass(frozen=True)
class _Rows:
    """The depthwise layer's output rows from the ring: ``g`` its geometry; rows outside the
    image read ``zero_row``; a stride-2 layer keeps each channel's share of its next output
    row in ``carry`` (``carry_floats`` per channel), so an input row both need is read once."""

    g: Geometry
    ring: Ring
    rows_buffer: ir.Value
    zero_row: ir.Value
    carry: ir.Value | None
    carry_floats: int

    def emit(
        self,
        k: Kernel,
        d: Instr,
        rows: tuple[ir.Value, ir.Value, ir.Value],
        out_image: ir.Value,
        chain: Callable[[ir.Value, ir.Value, ir.Value, int], ir.Value] | None,
    ) -> None:
        """Output rows ``[rows[0], rows[1])`` of every channel (``rows[2]``: the unit's first
        output row, whose carry is computed rather than read), channel by channel."""
        b, g = k.b, self.g
        y_from, upto, y_first = rows
        filt = k.pointer(d.sources[1])
        plane = g.oh * g.ow
        with b.if_then(b.icmp_signed("<", y_from, upto)), for_range(b, g.cout, name="ch") as ch:
            channel = float_at(b, self.rows_buffer, b.mul(ch, i64(self.ring.channel_floats)))
            weights = [
                splat(b, b.load(float_at(b, filt, b.add(b.mul(ch, i64(9)), i64(t))), typ=F32))
                for t in range(9)
            ]
            taps = [weights[i * 3 : i * 3 + 3] for i in range(3)]
            with for_range(b, upto, y_from, name="oy") as y:
                out_row = (out_image, b.add(b.mul(ch, i64(plane)), b.mul(y, i64(g.ow))))

                def finish(x0: ir.Value, acc: ir.Value, lanes: int, ch=ch, y=y) -> ir.Value:
                    return acc if chain is None else chain(ch, b.add(b.mul(y, i64(g.ow)), x0), acc, lanes)

                inputs = [
                    self._row(b, channel, b.sub(b.add(b.mul(y, i64(g.sh)), i64(i)), i64(1))) for i in range(3)
                ]
                if self.carry is None:
                    output_row(k, g, inputs, taps, out_row, finish)
                else:
                    self._carried_row(k, (ch, y, y_first), inputs, taps, out_row, finish)

    def _row(self, b: ir.IRBuilder, channel: ir.Value, r: ir.Value) -> ir.Value:
        """Where input row ``r`` of a channel is: its ring slot, or the zero row outside."""
        inside = b.and_(b.icmp_signed(">=", r, i64(0)), b.icmp_signed("<", r, i64(self.g.h)))
        slot = self.ring.slot_of(b, b.select(inside, r, i64(0)))
        return b.select(inside, float_at(b, channel, b.mul(slot, i64(self.g.w))), self.zero_row)

    def _carried_row(
        self,
        k: Kernel,
        where: tuple[ir.Value, ir.Value, ir.Value],
        inputs: list[ir.Value],
        taps: list[list[ir.Value]],
        out_row: tuple[ir.Value, ir.Value],
        finish: Callable[[ir.Value, ir.Value, int], ir.Value],
    ) -> None:
        """A stride-2 output row: the first filter row's share comes from the carry (computed
        here on the unit's first row), the last input row's share for the next output row
        goes back into it. ``where``: channel, output row, the unit's first output row."""
        b, g = k.b, self.g
        ch, y, y_first = where
        carry = float_at(b, self.carry, b.mul(ch, i64(self.carry_floats)))

        with b.if_then(b.icmp_signed("==", y, y_first)):

            def first_carry(x0: ir.Value, lanes: int, masks) -> None:
                b.store(
                    filter_row(k, taps[0], stride2_windows(k, g, inputs[0], x0, masks)),
                    float_at(b, carry, x0),
                    align=4,
                )

            chunks(k, g, first_carry)
        undefined, in_order = ir.Constant(F32X16, ir.Undefined), shuffle_mask(PAIRS_SWAPPED)

        def chunk(x0: ir.Value, lanes: int, masks) -> None:
            slot = float_at(b, carry, x0)
            acc = b.fadd(
                b.load(slot, typ=F32X16, align=4),
                filter_row(k, taps[1], stride2_windows(k, g, inputs[1], x0, masks)),
            )
            # this row's last input row, the next one's first
            shared = stride2_windows(k, g, inputs[2], x0, masks)
            acc = b.fadd(acc, filter_row(k, taps[2], shared))
            b.store(filter_row(k, taps[0], shared), slot, align=4)
            acc = finish(x0, b.shuffle_vector(acc, undefined, in_order), lanes)
            vector_store(k, float_at(b, out_row[0], b.add(out_row[1], x0)), acc, lanes)

        chunks(k, g, chunk)


def _expanded_shape(g: Geometry) -> tuple[int, int, int, int]:
    return (g.n, g.cout, g.h, g.w)


def _depthwise_geometry(g: Geometry, oh: int, ow: int, stride: int) -> Geometry:
    """The depthwise layer's geometry over the expanded tensor (3x3, padding 1)."""
    return dataclasses.replace(
        g,
        c=g.cout,
        kh=3,
        kw=3,
        oh=oh,
        ow=ow,
        sh=stride,
        sw=stride,
        pads=(1, 1, 1, 1),
        dh=1,
        dw=1,
        group=g.cout,
    )


def _larger(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


def _smaller(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)
