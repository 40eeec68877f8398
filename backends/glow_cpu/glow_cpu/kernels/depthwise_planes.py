"""What the depthwise kernels that take whole (image, channel) planes share around their
rows: whether the fused element-wise chain runs in the kernel, and each plane's operands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_cpu.emit import Kernel
from glow_cpu.kernels.chain import tile_epilogue
from glow_cpu.kernels.simd import splat
from glow_cpu.loops import float_at, i64

if TYPE_CHECKING:  # conv.py imports the depthwise kernels
    from glow_cpu.kernels.conv import Geometry


def fuse_chain(k: Kernel) -> bool:
    """Whether the kernel applies its fused chain at its stores; marks the chain done either
    way it is handled here (else ``epilogue_pass`` applies it afterwards)."""
    shape = k.types[0].shape
    fused = bool(k.epilogue) and tile_epilogue(k, shape, [(0, i64(0))], 1, i64(0)) is not None
    k.epilogue_done = fused or not k.epilogue
    return fused


def plane_at(
    k: Kernel, g: Geometry, plane: ir.Value, m: ir.Value, fused: bool
) -> tuple[ir.Value, ir.Value, list[ir.Value], ir.Value, Callable | None]:
    """For input plane ``plane`` (image * C + channel) and channel multiplier step ``m``:
    (image, output channel, the channel's taps as splatted vectors, the input plane's first
    element, the chain applied at the output channel's stores or None)."""
    b, (src, filt) = k.b, k.sources
    image, ci = b.udiv(plane, i64(g.c)), b.urem(plane, i64(g.c))
    co = b.add(b.mul(ci, i64(g.cout // g.c)), m)
    weights = [splat(b, filt.load(b, b.add(b.mul(co, i64(g.taps)), i64(t)))) for t in range(g.taps)]
    in_plane = float_at(b, src.ptr, b.mul(plane, i64(g.h * g.w)))
    epilogue = tile_epilogue(k, k.types[0].shape, [(0, image)], 1, i64(0)) if fused else None
    return image, co, weights, in_plane, epilogue
