"""The blocked-channel direct convolution (``kernels/conv_blocked.py``) on the shapes that pick
each of its tilings: a row cut into balanced tiles with a shorter last one, rows narrower
than a tile stacked whole (with a last partial stack), one or two output blocks per tile,
strides, dilations, 5x5 filters, batches (whole images per thread, or rows of all images in
both unit orders), with and without a fused chain (a residual is read along the transposed
rows), on 1 and 2 threads. Checked against onnx's reference evaluator, and each shape is
asserted to take the blocked path.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import conv_model
from glow_cpu.jit import host_target
from glow_cpu.kernels import conv_blocked
from glow_cpu.kernels.conv import Geometry
from glow_cpu.registers import AVX2, AVX512, register_file
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import max_relative_error

# (batch, channels, height, width, out channels, kernel, stride, pad, group), dilation
SHAPES = [
    ((1, 32, 9, 30, 32, 3, 1, 1, 1), 1),  # 30 wide: tiles of 10 pixels, two output blocks
    ((2, 16, 11, 13, 48, 3, 1, 1, 1), 1),  # 3 output blocks: one per tile, 13 pixels
    ((1, 16, 14, 10, 16, 3, 2, 1, 1), 1),  # stride 2, 5 wide: three rows stacked, a last single row
    ((1, 16, 12, 12, 32, 3, 1, 2, 1), 2),  # dilation 2
    ((3, 32, 7, 7, 64, 3, 1, 1, 1), 1),  # a batch of 7x7 planes, groups outermost
    ((2, 64, 5, 9, 32, 5, 1, 2, 1), 1),  # 5x5 filter, 9 wide
    ((1, 16, 4, 4, 16, 3, 1, 1, 1), 1),  # the whole 4x4 plane in one tile of 16 pixels
    ((3, 16, 20, 20, 64, 3, 1, 1, 1), 1),  # small filter, large input: images outermost on 2 threads
    ((1, 16, 9, 58, 32, 3, 1, 1, 1), 1),  # 58 wide: tiles of 12, a last one of 10
]
EPILOGUES = ["bias_relu", "bias_residual_relu", "none"]
_HOST = host_target()
HOST_REGISTERS = register_file(_HOST.triple, _HOST.features, _HOST.cpu)


def _geometry(shape: tuple[int, ...], dilation: int) -> Geometry:
    n, c, h, w, cout, k, s, pad, group = shape
    span = dilation * (k - 1) + 1
    oh, ow = (h + 2 * pad - span) // s + 1, (w + 2 * pad - span) // s + 1
    return Geometry(n, c, h, w, cout, k, k, oh, ow, s, s, (pad,) * 4, dilation, dilation, group)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("case", SHAPES, ids=["x".join(map(str, s)) + f"d{d}" for s, d in SHAPES])
def test_blocked_convolution_matches_reference(case, epilogue, threads):
    shape, dilation = case
    assert conv_blocked.applies(_geometry(shape, dilation), True, HOST_REGISTERS.accumulators)
    seed = (sum(shape) * 7919 + len(epilogue) * 31 + threads) % (1 << 31)
    model, feeds, output = conv_model(shape, epilogue, seed, dilation)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    # Winograd off: these shapes exercise the direct kernels (test_cpu_winograd.py covers it).
    options = {"threads": threads, "parallel_work": 0, "winograd": False}
    compiled = glow_core.compile(model, backend="cpu", options=options)
    got = compiled.run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert max_relative_error({output: got}, {output: expected}) < 1e-5


@pytest.mark.parametrize("cout", [16, 32, 48, 64, 512])
@pytest.mark.parametrize("width", range(1, 70))
def test_tiles_fit_the_registers_and_the_transpose(width, cout):
    g = _geometry((1, 16, 7, width + 2, cout, 3, 1, 0, 1), 1)
    tiles = conv_blocked.tiling(g)
    assert (g.cout // 16) % tiles.blocks == 0
    assert tiles.pixels <= 16  # one transposed vector per output channel
    assert tiles.blocks * tiles.pixels <= 24  # accumulators, with filter vectors and broadcasts beside
    assert tiles.cols == width or tiles.rows == 1
    assert tiles.cols <= width


def test_large_strided_planes_take_the_gemm_on_eight_lane_targets():
    """A 3x3 stride-2 layer with a 28x28, 8x8 or 7x7 output goes to the phase-split GEMM on
    AVX2 and stays blocked on AVX-512; with a 4x4 output, or 96 output channels, it stays
    blocked on both."""
    for shape in [
        (1, 128, 56, 56, 128, 3, 2, 1, 1),
        (1, 192, 17, 17, 320, 3, 2, 0, 1),
        (1, 512, 14, 14, 512, 3, 2, 1, 1),
    ]:
        assert not conv_blocked.applies(_geometry(shape, 1), True, AVX2.accumulators), shape
        assert conv_blocked.applies(_geometry(shape, 1), True, AVX512.accumulators), shape
    small = _geometry((1, 512, 8, 8, 512, 3, 2, 1, 1), 1)
    assert conv_blocked.applies(small, True, AVX2.accumulators)
    assert conv_blocked.applies(_geometry((1, 96, 35, 35, 96, 3, 2, 0, 1), 1), True, AVX2.accumulators)
    assert conv_blocked.applies(_geometry((1, 64, 56, 56, 64, 3, 1, 1, 1), 1), True, AVX2.accumulators)


BANDS = [(1, 32, 9, 30, 32, 3, 1, 1, 1), (1, 16, 14, 10, 16, 3, 2, 1, 1), (1, 16, 23, 17, 32, 3, 2, 1, 1)]


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("shape", BANDS)
def test_bands_of_rows_equal_one_thread(shape, threads, monkeypatch):
    """One image whose filter is smaller than its blocked input: the parts take bands of
    rows (every output channel) instead of groups of channels, with the same sums, so the
    result is bit-equal to one thread's either way; outputs poisoned before the run."""
    g = _geometry(shape, 1)
    assert conv_blocked.split_by_rows(g, threads) and not conv_blocked.split_by_rows(g, 1)
    model, feeds, output = conv_model(shape, "bias_residual_relu", sum(shape) * 131 + threads)
    options = {"parallel_work": 0, "winograd": False, "cache": False}

    def run(count: int) -> np.ndarray:
        compiled = glow_core.compile(model, backend="cpu", options={"threads": count, **options})
        return compiled.run(feeds)[output]

    one = run(1)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    assert max_relative_error({output: one}, {output: expected}) < 1e-5
    for rows in (True, False):
        monkeypatch.setattr(conv_blocked, "ROWS_SPLIT", rows)
        got = run(threads)
        assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
        assert np.array_equal(got, one), f"rows split {rows}: differs from one thread"


def test_resnet50s_strided_layers_split_by_rows_where_the_filter_is_smaller():
    """ResNet-50's 128 -> 128 stride-2 layer on 56x56 (590 KB filter, 1.7 MB blocked input)
    takes bands of rows; 256 on 28x28 and 512 on 14x14 (filters larger than their inputs)
    keep groups of output channels, and so does a batch."""
    assert conv_blocked.split_by_rows(_geometry((1, 128, 56, 56, 128, 3, 2, 1, 1), 1), 2)
    assert not conv_blocked.split_by_rows(_geometry((1, 256, 28, 28, 256, 3, 2, 1, 1), 1), 2)
    assert not conv_blocked.split_by_rows(_geometry((1, 512, 14, 14, 512, 3, 2, 1, 1), 1), 2)
    assert not conv_blocked.split_by_rows(_geometry((2, 128, 56, 56, 128, 3, 2, 1, 1), 1), 2)


def test_deep_pointwise_and_grouped_convolutions_stay_on_the_gemm():
    assert not conv_blocked.applies(_geometry((1, 64, 8, 8, 64, 1, 1, 0, 1), 1), constant_filter=True)
    assert not conv_blocked.applies(_geometry((1, 64, 8, 8, 64, 1, 2, 0, 1), 1), constant_filter=True)
    assert not conv_blocked.applies(_geometry((1, 64, 8, 8, 64, 3, 1, 1, 2), 1), constant_filter=True)
    assert not conv_blocked.applies(_geometry((1, 24, 8, 8, 64, 3, 1, 1, 1), 1), constant_filter=True)
    assert not conv_blocked.applies(_geometry((1, 64, 8, 8, 64, 3, 1, 1, 1), 1), constant_filter=False)


@pytest.mark.parametrize("rows", [1, 7, 12, 16])
def test_transpose16_moves_every_lane(rows):
    """The register transpose alone, compiled and run on 16 x ``rows`` distinct values."""
    import ctypes

    from glow_cpu import jit
    from glow_cpu.emit import F32X16
    from llvmlite import ir

    module = ir.Module("transpose")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), ir.PointerType()]), "t")
    b = ir.IRBuilder(fn.append_basic_block())
    source, target = fn.args
    vectors = [
        b.load(
            b.gep(source, [ir.Constant(ir.IntType(64), 16 * r)], source_etype=ir.FloatType()),
            typ=F32X16,
            align=4,
        )
        for r in range(rows)
    ]
    for column, vector in enumerate(conv_blocked.transpose16(b, vectors)):
        b.store(
            vector,
            b.gep(target, [ir.Constant(ir.IntType(64), 16 * column)], source_etype=ir.FloatType()),
            align=4,
        )
    b.ret_void()
    target_machine = jit.host_target()
    loaded = jit.LoadedObject(jit.compile_object(str(module), target_machine), target_machine)
    matrix = np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)
    out = np.full((16, 16), np.nan, np.float32)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(loaded.function("t"))(
        matrix.ctypes.data, out.ctypes.data
    )
    np.testing.assert_array_equal(out[:, :rows], matrix.T)
