"""MatMul, BatchMatMul and Convolution for float64, float16 and bfloat16.

The float32 kernels (``linalg``, ``conv``) are a packed, register-blocked GEMM tuned for
zmm registers; these kinds are rare in models (float64 in classical-ML graphs and
quantization arithmetic, the half kinds in attention and a few convolutions), so they get
plain loop kernels instead, written for correctness and shaped so LLVM vectorizes the
innermost loop:

- a product row ``C[i, :] += A[i, p] * B[p, :]`` runs along contiguous columns of B (four
  rows at a time, so each element of B loaded serves four);
- a convolution output plane is accumulated tap by tap, ``acc[oy, :] += w * X[iy, ix(:)]``,
  each tap over only the output rows and columns whose input is in bounds (computed per tap,
  so padding costs nothing and needs no test in the inner loop).

Results accumulate in a per-thread scratch row or plane in the compute type: double for
float64, float32 for the half kinds, which are then rounded once, at the store (as the
float64 reference rounded to the kind would be, up to float32's summation error).
"""

from __future__ import annotations

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, Tensor, emits
from glow_cpu.kinds import compute_type
from glow_cpu.loops import for_range, i64

WIDE_KINDS = frozenset({ElemKind.float64, ElemKind.float16, ElemKind.bfloat16})
"""The float kinds the float32 GEMM does not handle."""


def _scratch(k: Kernel, count: int, ty: ir.Type) -> ir.Value:
    """A private accumulator of ``count`` elements of ``ty`` (this thread's alone)."""
    return k.private_scratch(count * (8 if isinstance(ty, ir.DoubleType) else 4))


def _acc_at(b: ir.IRBuilder, acc: ir.Value, ty: ir.Type, index: ir.Value) -> ir.Value:
    return b.gep(acc, [index], inbounds=True, source_etype=ty)


def _zero(b: ir.IRBuilder, acc: ir.Value, ty: ir.Type, count: int) -> None:
    with for_range(b, count, name="zero") as j:
        b.store(ir.Constant(ty, 0.0), _acc_at(b, acc, ty, j))


def _store(b: ir.IRBuilder, dest: Tensor, base: ir.Value, acc: ir.Value, ty: ir.Type, count: int) -> None:
    """``dest[base + j] = acc[j]`` for j < count, rounded to the destination kind once."""
    with for_range(b, count, name="out") as j:
        dest.store(b, b.add(base, j), b.load(_acc_at(b, acc, ty, j), typ=ty))


def _no_epilogue(k: Kernel) -> None:
    # Fusion folds element-wise consumers only into float32 producers; these never get any.
    assert not k.epilogue, f"{k.instr.kind}[{k.elem.name}] cannot apply a fused epilogue"


_ROWS = 4
"""Rows of C computed together: each element of B read serves this many rows (the kernel
streams all of B once per block of rows, so B's traffic falls by this factor)."""


def _product_rows(k: Kernel, batch: int, m: int, depth: int, n: int) -> None:
    """``C[e, i, :] = sum_p A[e, i, p] * B[e, p, :]``, ``_ROWS`` rows of one batch entry at a
    time, threads sharing the blocks. A block past the last row repeats it (clamped), so
    the inner loops have no edge test; the repeated row is stored twice, identically."""
    dest, (lhs, rhs) = k.dest, k.sources
    ty = compute_type(dest.elem)
    k.work = max(k.work, batch * m * n * depth // 8)
    blocks = -(-m // _ROWS)
    b = k.b
    acc = _scratch(k, _ROWS * n, ty)
    start, stop = k.split(batch * blocks)
    with for_range(b, stop, start, name="block") as block:
        entry = b.udiv(block, i64(blocks))
        first = b.mul(b.urem(block, i64(blocks)), i64(_ROWS))
        rows = []
        for r in range(_ROWS):
            row = b.add(first, i64(r))
            row = b.select(b.icmp_signed("<", row, i64(m)), row, i64(m - 1))
            rows.append(b.add(b.mul(entry, i64(m)), row))  # row of the [batch * m, ...] views
        b_base = b.mul(entry, i64(depth * n))
        _zero(b, acc, ty, _ROWS * n)
        with for_range(b, depth, name="p") as p:
            a = [lhs.load(b, b.add(b.mul(row, i64(depth)), p)) for row in rows]
            b_row = b.add(b_base, b.mul(p, i64(n)))
            with for_range(b, n, name="j") as j:
                value = rhs.load(b, b.add(b_row, j))
                for r in range(_ROWS):
                    slot = _acc_at(b, acc, ty, b.add(i64(r * n), j))
                    b.store(b.fadd(b.load(slot, typ=ty), b.fmul(a[r], value)), slot)
        for r, row in enumerate(rows):
            _store(b, dest, b.mul(row, i64(n)), _acc_at(b, acc, ty, i64(r * n)), ty, n)


@emits("MatMul", kinds=WIDE_KINDS)
def emit_matmul_wide(k: Kernel) -> None:
    _no_epilogue(k)
    m, depth = k.sources[0].shape
    _product_rows(k, 1, m, depth, k.sources[1].shape[1])


@emits("BatchMatMul", kinds=WIDE_KINDS)
def emit_batch_matmul_wide(k: Kernel) -> None:
    _no_epilogue(k)
    batch, m, depth = k.sources[0].shape
    _product_rows(k, batch, m, depth, k.sources[1].shape[2])


def _in_bounds(
    b: ir.IRBuilder, tap: ir.Value, stride: int, pad: int, dilation: int, size: int, out_size: int
) -> tuple[ir.Value, ir.Value]:
    """The output indices ``[lo, hi)`` whose input ``o * stride - pad + tap * dilation`` lies in
    ``[0, size)``, for a tap index known only at run time."""
    first = b.sub(i64(pad), b.mul(tap, i64(dilation)))  # o * stride >= first
    positive = b.icmp_signed(">", first, i64(0))
    lo = b.select(positive, b.sdiv(b.add(first, i64(stride - 1)), i64(stride)), i64(0))
    last = b.add(first, i64(size - 1))  # o * stride <= last
    hi = b.select(b.icmp_signed(">=", last, i64(0)), b.add(b.sdiv(last, i64(stride)), i64(1)), i64(0))
    hi = b.select(b.icmp_signed(">", hi, i64(out_size)), i64(out_size), hi)
    return lo, hi


@emits("Convolution", kinds=WIDE_KINDS)
def emit_convolution_wide(k: Kernel) -> None:
    """Direct convolution, one output plane (image, output channel) at a time per thread."""
    _no_epilogue(k)
    dest, (src, weights) = k.dest, k.sources
    images, channels, height, width = src.shape
    cout, group_channels, kh, kw = weights.shape
    _, _, oh, ow = dest.shape
    sh, sw = k.attrs["strides"]
    top, left = k.attrs["pads"][0], k.attrs["pads"][1]
    dh, dw = k.attrs["dilations"]
    per_group = cout // k.attrs["group"]
    ty = compute_type(dest.elem)
    k.work = max(k.work, images * cout * oh * ow * group_channels * kh * kw // 8)
    b = k.b
    acc = _scratch(k, oh * ow, ty)
    start, stop = k.split(images * cout)
    with for_range(b, stop, start, name="plane") as plane:
        image = b.udiv(plane, i64(cout))
        out_channel = b.urem(plane, i64(cout))
        first_channel = b.mul(b.udiv(out_channel, i64(per_group)), i64(group_channels))
        _zero(b, acc, ty, oh * ow)
        with for_range(b, group_channels, name="ci") as ci:
            channel = b.add(first_channel, ci)
            in_base = b.mul(b.add(b.mul(image, i64(channels)), channel), i64(height * width))
            w_base = b.mul(b.add(b.mul(out_channel, i64(group_channels)), ci), i64(kh * kw))
            with for_range(b, kh, name="ky") as ky:
                y0, y1 = _in_bounds(b, ky, sh, top, dh, height, oh)
                with for_range(b, kw, name="kx") as kx:
                    x0, x1 = _in_bounds(b, kx, sw, left, dw, width, ow)
                    weight = weights.load(b, b.add(w_base, b.add(b.mul(ky, i64(kw)), kx)))
                    column = b.sub(b.mul(kx, i64(dw)), i64(left))  # ix = ox * sw + column
                    with for_range(b, y1, y0, name="oy") as oy:
                        iy = b.add(b.sub(b.mul(oy, i64(sh)), i64(top)), b.mul(ky, i64(dh)))
                        in_row = b.add(b.add(in_base, b.mul(iy, i64(width))), column)
                        out_row = b.mul(oy, i64(ow))
                        with for_range(b, x1, x0, name="ox") as ox:
                            slot = _acc_at(b, acc, ty, b.add(out_row, ox))
                            x = src.load(b, b.add(in_row, b.mul(ox, i64(sw))))
                            b.store(b.fadd(b.load(slot, typ=ty), b.fmul(weight, x)), slot)
        _store(b, dest, b.mul(plane, i64(oh * ow)), acc, ty, oh * ow)
