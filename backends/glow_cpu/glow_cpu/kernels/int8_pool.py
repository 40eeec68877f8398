"""MaxPool on int8/uint8 (a QDQ model's pools, folded onto the integers by fold-qdq).

The generic pool loop (``reduce.emit_pool``) finds every output's window bounds at run
time and keeps a scalar accumulator: ResNet-50's stem MaxPool on int8 took 20 times its
float32 vector kernel. This kernel works one output row at a time, as the depthwise int8
convolution does: a row of running maxima in private scratch, and for each filter tap an
update over the output columns whose input column is inside the image (bounds known at
compile time), a loop LLVM vectorizes. Padding never enters a maximum, as in the reference.
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel
from glow_cpu.kernels.int8_shape import column_reach
from glow_cpu.loops import I8, for_range, i64


def _at(b: ir.IRBuilder, pointer: ir.Value, index: ir.Value) -> ir.Value:
    return b.gep(pointer, [index], inbounds=True, source_etype=I8)


def int8_max_pool(k: Kernel) -> None:
    """MaxPool of an int8 or uint8 NCHW tensor (any kernel, strides and pads)."""
    b = k.b
    dest, src = k.dest, k.sources[0]
    (n, c, h, w), (_, _, oh, ow) = src.shape, dest.shape
    (kh, kw), (sh, sw) = k.attrs["kernel"], k.attrs["strides"]
    top, left = k.attrs["pads"][0], k.attrs["pads"][1]
    unsigned = dest.elem is ElemKind.uint8
    lowest = ir.Constant(I8, 0 if unsigned else -128)
    greater = "icmp_unsigned" if unsigned else "icmp_signed"
    k.work = max(k.work, n * c * oh * ow * kh * kw // 4)
    row_max = k.private_scratch(ow)
    start, stop = k.split(n * c)
    with for_range(b, stop, start, name="plane") as plane:
        source = _at(b, src.ptr, b.mul(plane, i64(h * w)))
        with for_range(b, oh, name="oy") as oy:
            with for_range(b, ow, name="reset") as ox:
                b.store(lowest, _at(b, row_max, ox))
            for ky in range(kh):
                iy = b.add(b.mul(oy, i64(sh)), i64(ky - top))
                with b.if_then(b.icmp_unsigned("<", iy, i64(h))):
                    row = _at(b, source, b.mul(iy, i64(w)))
                    for kx in range(kw):
                        low, high = column_reach(kx - left, sw, w, ow)
                        with for_range(b, high, low, name="ox") as ox:
                            value = b.load(_at(b, row, b.add(b.mul(ox, i64(sw)), i64(kx - left))), typ=I8)
                            slot = _at(b, row_max, ox)
                            best = b.load(slot, typ=I8)
                            b.store(b.select(getattr(b, greater)(">", value, best), value, best), slot)
            out = _at(b, dest.ptr, b.mul(b.add(b.mul(plane, i64(oh)), oy), i64(ow)))
            with for_range(b, ow, name="store") as ox:
                b.store(b.load(_at(b, row_max, ox), typ=I8), _at(b, out, ox))
