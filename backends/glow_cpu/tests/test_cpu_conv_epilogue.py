"""Convolutions with their fused epilogues, on the shapes that pick each store path.

A convolution on phase planes computes extra columns. When the fused chain reads only
per-channel values (bias, ReLU, Clip) the GEMM drops them as it stores (kept lanes compressed
in a register, stored and read back as a prefix of the row); a chain that reads a
whole tensor (a residual Add) goes through scratch and a last pass instead. Both must
agree with onnx's reference evaluator, for K in one block or several, partial row and
column panels, strides, padding, groups and batches (the images of a batch share each
block of the filter), on 1 and 2 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import conv_model
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import max_relative_error

# (batch, channels, height, width, out channels, kernel, stride, pad, group)
SHAPES = [
    (1, 40, 9, 11, 20, 3, 1, 1, 1),  # K = 360: two K blocks; 20 rows: a partial row panel
    (2, 16, 13, 13, 24, 3, 2, 1, 1),  # stride 2: four phase planes
    (1, 3, 23, 21, 16, 7, 2, 3, 1),  # the 7x7 stem shape, odd widths
    (3, 64, 7, 7, 64, 3, 1, 1, 1),  # a 7x7 plane: 12 x 32 tiles; panels of 3 images in a group
    (1, 96, 20, 20, 32, 3, 1, 1, 2),  # groups, K = 432 per group
    (2, 300, 6, 5, 12, 3, 1, 2, 1),  # K = 2700: eleven blocks; pad 2
    (2, 256, 5, 5, 72, 3, 1, 1, 1),  # A of 648 KiB stays in L2: groups outermost
    (4, 256, 5, 5, 128, 3, 1, 1, 1),  # A of 1.2 MiB, 2 groups on 1 thread: K blocks outermost
    (2, 512, 4, 4, 24, 1, 1, 0, 1),  # 1x1 read in place, two K blocks, images in one group
    (2, 64, 9, 9, 96, 3, 2, 1, 1),  # stride 2 on a 5x5 output: 12 x 32 tiles, 14 column tail
    (1, 64, 6, 6, 192, 3, 1, 1, 2),  # two groups of 96 rows on a 6x6 output
    (1, 48, 7, 7, 40, 1, 1, 0, 1),  # 49 columns: the 49th accumulated over rows; 4-row panel
    (2, 300, 7, 7, 36, 1, 1, 0, 1),  # the same over two K blocks and two images
    (2, 24, 7, 5, 40, 3, 1, 1, 1),  # a 7-wide phase grid of 49: one 8 x 64 tile, tail, compressed
    (1, 64, 14, 14, 72, 1, 2, 0, 1),  # 1x1 stride 2 onto 7x7: one 8 x 64 tile per row panel
]
EPILOGUES = ["bias_relu", "bias_clip", "bias_residual_relu", "none"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_convolution_epilogue_matches_reference(shape, epilogue, threads):
    seed = hash((shape, epilogue, threads)) % (1 << 31)
    model, feeds, output = conv_model(shape, epilogue, seed)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    # Winograd off: these shapes exercise the direct kernels (test_cpu_winograd.py covers it).
    options = {"threads": threads, "parallel_work": 0, "winograd": False}
    compiled = glow_core.compile(model, backend="cpu", options=options)
    got = compiled.run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert max_relative_error({output: got}, {output: expected}) < 1e-5
