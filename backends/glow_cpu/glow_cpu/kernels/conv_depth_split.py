"""A 1x1 convolution much deeper than it is wide, cut by depth between two threads.

A 1x1 convolution of one image is the product W [Cout, Cin] x X [Cin, H*W]. On two threads
the GEMM gives each its own row panels (output channels) on small planes, and then each
reads the whole input X, half of which the other core has just written: ResNet-50's
1024 -> 256 layers on 14x14 read 400 KB each from the other core's cache, which is slow
(about 0.1-0.35 ms a MB on an Intel Xeon, against the same bytes from its own cache or
memory). Where Cin >= 2 Cout the result is the smaller of the two, so here each thread
multiplies its half of the depth instead, its own half of X (the channels it wrote, when
the layer before split its output channels the same way) by its half of W's columns, into
a partial result in shared scratch; then a second phase adds the two partials, row by row,
through the fused chain (bias, ReLU) into the output: each thread reads half of the other's
partial, a quarter of what it read of X.

Results stay bit-equal for every thread count: such a product always sums its depth in two
blocks of half of it (``Gemm.kc``), each from zero in registers, the second added to the
first, whether one thread runs both blocks or each thread one (``two_depth_blocks``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from glow_cpu.emit import Kernel, Tensor
from glow_cpu.kernels.chain import chain_loop
from glow_cpu.kernels.gemm import emit_gemm
from glow_cpu.kernels.gemm_shape import KC, Gemm
from glow_cpu.loops import float_at, for_range, i64, row_major_strides, scalar_code_loops

if TYPE_CHECKING:  # conv.py imports this module
    from glow_cpu.kernels.conv import Geometry

DEPTH_SPLIT = True
"""Whether two parts cut such products by depth (benches turn it off to compare; the two
blocks stay either way)."""


def two_depth_blocks(g: Geometry) -> bool:
    """Whether this 1x1 convolution's product sums its depth in two blocks of half of it at
    every thread count: one image, one group, a depth over one block (``KC``), even, and at
    least twice the output channels. A shape rule only, so the summation order never
    depends on the threads. ResNet-50's 512 -> 128 and 512 -> 256 layers on 28x28 (two
    blocks of 256 already), 1024 -> 256 on 14x14, 1024 -> 512 and 2048 -> 512 (blocks of
    512 and 1024 instead of 256: one thread 0-3% faster in the model, Intel Xeon)."""
    return g.n == 1 and g.group == 1 and g.c > KC and g.c % 2 == 0 and g.c >= 2 * g.cout


def split_by_depth(k: Kernel) -> bool:
    """Whether this kernel's two parts take one depth block each (two parts exactly)."""
    return DEPTH_SPLIT and k.parts == 2 and k.work >= k.min_work


def emit_depth_split(k: Kernel, g: Geometry, gemm: Gemm) -> None:
    """``gemm`` (the whole product into the output) as two phases: block ``h`` of half the
    depth by part ``h`` into partial ``h``; then the partials added through the fused chain
    into the output, split by rows."""
    half = g.c // 2
    pixels = g.h * g.w
    partials = k.shared_scratch(2 * g.cout * pixels * 4)
    b = k.b
    start, stop = k.split(2)
    with for_range(b, stop, start, name="half") as h:
        first = b.mul(h, i64(half))
        product = dataclasses.replace(
            gemm,
            outer=half,
            kc=half,
            a=float_at(b, gemm.a, b.mul(first, i64(gemm.a_k))),
            b=float_at(b, gemm.b, b.mul(first, i64(gemm.b_outer))),
            c=float_at(b, k.shared(partials), b.mul(h, i64(g.cout * pixels))),
            epilogue=None,
            epilogue_for=None,
        )
        emit_gemm(k, product, split=False)
    k.phase()
    shared = k.shared(partials)
    block = [Tensor(float_at(k.b, shared, i64(h * g.cout * pixels)), k.types[0]) for h in (0, 1)]
    dest = k.dest
    with scalar_code_loops():  # the convolution emits its products in explicit_vector_loops
        chain_loop(k, dest, k.epilogue, (block[0], row_major_strides(dest.shape)), also=block[1:])
    k.epilogue_done = True
