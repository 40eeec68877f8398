"""MaxPool on int8/uint8 (a QDQ model's pools folded onto the integers by fold-qdq, and the
quantize pass's), vectorized along the output width.

NCHW keeps a row's elements contiguous, so the kernel works on ``LANES`` outputs of a row at
once. Each input plane is first copied into a private padded plane filled with the kind's
lowest value, which never wins a maximum (the reference skips padding; a window always
holds at least the value it compares with, so the two agree bit for bit). Then, per output
row and chunk of ``LANES`` outputs, every window tap is one unaligned vector load from the
padded plane (for stride s, ``s * LANES`` bytes of which every s-th is taken by one
shuffle) and one vector maximum (signed or unsigned compare and select, which x86 selects
as ``pmaxsb`` / ``pmaxub``). The tap loops are unrolled here and every loop carries
``vectorize=False``: the vectors are explicit IR, and LLVM's loop vectorizer on small max
loops is what aborts on AVX-512 targets (see test_cpu_pool_window.py).

ResNet-50's stem pool (1x64x112x112, 3x3 stride 2 pad 1) went from 4.4 ms with the former
row kernel (scalar running maxima) to the figures in docs/quantization.md.
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel
from glow_cpu.loops import I8, for_range, i64, shuffle_mask

LANES = 32
"""Output bytes per step: a 256-bit register of int8 (LLVM splits or joins for other widths)."""


def _at(b: ir.IRBuilder, pointer: ir.Value, index: ir.Value | int) -> ir.Value:
    return b.gep(pointer, [i64(index) if isinstance(index, int) else index], inbounds=True, source_etype=I8)


def _bytes(count: int) -> ir.VectorType:
    return ir.VectorType(I8, count)


def _copy(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, count: int) -> None:
    """``count`` bytes from ``src`` to ``dst``: whole vectors in a loop, then the rest as one
    shorter vector (no byte past ``count`` is read or written)."""
    whole, rest = divmod(count, LANES)
    if whole:
        with for_range(b, whole, name="copy", vectorize=False) as i:
            offset = b.mul(i, i64(LANES))
            b.store(b.load(_at(b, src, offset), typ=_bytes(LANES), align=1), _at(b, dst, offset), align=1)
    if rest:
        offset = whole * LANES
        b.store(b.load(_at(b, src, offset), typ=_bytes(rest), align=1), _at(b, dst, offset), align=1)


def _fill(b: ir.IRBuilder, dst: ir.Value, count: int, value: ir.Constant) -> None:
    """``count`` bytes at ``dst`` set to ``value``, a vector at a time (the last one may
    write into the slack that follows; callers leave ``LANES`` bytes of it)."""
    vector = ir.Constant(_bytes(LANES), [value.constant] * LANES)
    with for_range(b, -(-count // LANES), name="fill", vectorize=False) as i:
        b.store(vector, _at(b, dst, b.mul(i, i64(LANES))), align=1)


def int8_max_pool(k: Kernel) -> None:
    """MaxPool of an int8 or uint8 NCHW tensor (any kernel, strides and pads)."""
    b = k.b
    dest, src = k.dest, k.sources[0]
    (n, c, h, w), (_, _, oh, ow) = src.shape, dest.shape
    (kh, kw), (sh, sw) = k.attrs["kernel"], k.attrs["strides"]
    top, left = k.attrs["pads"][0], k.attrs["pads"][1]
    unsigned = dest.elem is ElemKind.uint8
    lowest = ir.Constant(I8, 0 if unsigned else -128)
    greater = b.icmp_unsigned if unsigned else b.icmp_signed
    k.work = max(k.work, n * c * oh * ow * kh * kw // 4)

    # The padded plane covers exactly the rows and columns some window reads; the input's
    # part of it (rows top.., columns left..) is rewritten per plane, the rest stays lowest.
    rows, cols = (oh - 1) * sh + kh, (ow - 1) * sw + kw
    copy_rows, copy_cols = max(0, min(h, rows - top)), max(0, min(w, cols - left))
    slack = LANES * sw + kw  # a last chunk's whole-vector loads read past the used columns
    padded = k.private_scratch(rows * cols + slack)
    _fill(b, padded, rows * cols + slack - LANES, lowest)

    chunks, rest = divmod(ow, LANES)
    start, stop = k.split(n * c)
    with for_range(b, stop, start, name="plane", vectorize=False) as plane:
        source = _at(b, src.ptr, b.mul(plane, i64(h * w)))
        if copy_cols:
            with for_range(b, copy_rows, name="iy", vectorize=False) as iy:
                target = _at(b, padded, b.add(b.mul(iy, i64(cols)), i64(top * cols + left)))
                _copy(b, target, _at(b, source, b.mul(iy, i64(w))), copy_cols)
        out_plane = _at(b, dest.ptr, b.mul(plane, i64(oh * ow)))
        with for_range(b, oh, name="oy", vectorize=False) as oy:
            window_top = _at(b, padded, b.mul(oy, i64(sh * cols)))
            out_row = _at(b, out_plane, b.mul(oy, i64(ow)))

            def outputs(x0: ir.Value, lanes: int) -> None:
                """Outputs ``x0 .. x0 + lanes`` of this row (whole vectors, ``lanes`` stored)."""
                first = _at(b, window_top, b.mul(x0, i64(sw)))
                best = None
                for ky in range(kh):
                    for kx in range(kw):
                        value = b.load(_at(b, first, ky * cols + kx), typ=_bytes(LANES * sw), align=1)
                        if sw > 1:
                            every = [lane * sw for lane in range(LANES)]
                            value = b.shuffle_vector(
                                value, ir.Constant(value.type, None), shuffle_mask(every)
                            )
                        best = value if best is None else b.select(greater(">", value, best), value, best)
                if lanes < LANES:
                    best = b.shuffle_vector(
                        best, ir.Constant(best.type, None), shuffle_mask(list(range(lanes)))
                    )
                b.store(best, _at(b, out_row, x0), align=1)

            if chunks:
                with for_range(b, chunks, name="ox", vectorize=False) as chunk:
                    outputs(b.mul(chunk, i64(LANES)), LANES)
            if rest:
                outputs(i64(chunks * LANES), rest)
