"""1x1 convolutions (the GEMM read in place) on the shapes MobileNetV2's projections give an
AVX2 tile, against a float64 numpy reference.

Three things are under test. Column tails (a partial vector of columns narrower than the
tile is tall, accumulated as A's rows times a broadcast of B) in 8 lanes when the rows fit
(``gemm_tile.tail_width``), in 16 otherwise. Edge tiles of one to three accumulators (a 7x7 plane's 49th
column, a last row panel of one or two rows) sum k over several independent accumulator
sets (``gemm_tile.edge_chains``), with a depth that is not a multiple of the unroll (the
remainder steps) and with several K blocks (partial sums stored and read back). And with few
row panels an AVX2 GEMM reads B in place instead of packing it (``gemm._few_readers``), an
AVX-512 one for close rows, few row panels or a shallow product
(``gemm._in_place_avx512``), prefetching the next panel where its rows are far apart.
Each runs with the AVX2 and the AVX-512 register file whatever this CPU has (a file only
changes the blocking), on 1 and 3 threads, with the fused chains the projections use. The
runtime poisons outputs before each run, so an element no tile wrote shows up as non-finite.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cpu_cases import conv_model
from glow_conformance.compare import TOLERANCE
from glow_cpu import backend as cpu_backend
from glow_cpu.kernels.gemm import _few_readers, _in_place_avx512, _panels_per_group
from glow_cpu.kernels.gemm_shape import GROUP, UNROLL, Gemm, live_accumulators
from glow_cpu.kernels.gemm_tile import _prefetches_b, edge_chains
from glow_cpu.registers import AVX2, AVX512
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

# (batch, channels, height, width, out channels): all 1x1, stride 1, no padding.
SHAPES = [
    (1, 99, 7, 7, 21),  # 49 columns: a 1-column tail; 21 rows = 4 x 5 + a 1-row panel; K % 4 = 3
    (2, 300, 7, 7, 16),  # two K blocks (256 + 44) under the chained edge tiles; two images
    (1, 144, 20, 20, 24),  # 5 row panels, K = 144: B in place on AVX2
    (1, 40, 9, 13, 32),  # 117 columns: a 5-column partial panel; 7 row panels, the last 2 rows
    (2, 33, 5, 5, 7),  # 5 + 2 rows, 25 columns (16 + 9), two images in one panel sequence
    (1, 576, 14, 14, 96),  # MobileNetV2's features.12 projection: 19 x 5 + 1 rows, a 4-column tail
    (1, 40, 6, 6, 24),  # 36 = 2 x 16 + 4 columns: an 8-lane tail (5 rows) on AVX2, 16 lanes (12) on AVX-512
    (1, 24, 20, 20, 30),  # K = 24 over 4 row panels (3 x 8 + 6) of rows 1600 bytes apart: shallow, in place
    (2, 70, 30, 30, 32),  # 4 row panels, rows 3600 bytes apart: in place on AVX-512, prefetched a panel ahead
    (1, 40, 16, 64, 24),  # rows a page apart (one L1 set): packed on AVX-512 one column panel at a time
]
EPILOGUES = ["none", "bias_clip", "bias_residual_relu"]


def _reference(model, feeds, epilogue: str) -> np.ndarray:
    """The convolution and its chain in float64."""
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    x = feeds["x"].astype(np.float64)
    y = np.einsum("oc,nchw->nohw", weights["w"][:, :, 0, 0], x)
    if epilogue == "none":
        return y
    y = y + weights["b"][None, :, None, None]
    if epilogue == "bias_clip":
        return np.clip(y, 0.0, 6.0)
    return np.maximum(y + feeds["r"].astype(np.float64), 0.0)


@pytest.mark.parametrize("registers", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_pointwise_edges_match_float64(shape, epilogue, threads, registers, monkeypatch, tmp_path):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_backend, "register_file", lambda *target: registers)
    seed = sum(shape) * 31 + EPILOGUES.index(epilogue) * 7 + threads
    model, feeds, output = conv_model((*shape, 1, 1, 0, 1), epilogue, seed)
    options = {"threads": threads, "parallel_work": 0, "winograd": False}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert relative_error(got, _reference(model, feeds, epilogue)) < TOLERANCE[ElemKind.float32]


def test_edge_chains_fit_the_register_file():
    """One accumulator gets ``UNROLL`` sets on AVX2 (6 accumulators), a tile that fills half
    the file or more gets one, and no edge tile's sets outgrow the file."""
    assert edge_chains(1, AVX2.accumulators) == UNROLL
    assert edge_chains(2, AVX2.accumulators) == 2  # 8 ymm accumulators: 3 sets spilled
    assert edge_chains(4, AVX2.accumulators) == 1
    assert edge_chains(5, AVX512.accumulators) == 4
    for file in (AVX2, AVX512):
        live = live_accumulators(file.accumulators)
        assert live == (file.accumulators - 1 if file is AVX2 else file.accumulators)
        for count in range(1, file.accumulators + 1):
            chains = edge_chains(count, file.accumulators)
            assert 1 <= chains <= UNROLL and chains * count <= max(count, live)


def _gemm(
    m_panels: int, depth: int, nr: int = 16, plane: int = 400, mr: int = 5, taps: tuple[int, ...] = (0,)
) -> tuple[Gemm, int]:
    gemm = Gemm(
        m=m_panels * mr, n=plane, outer=depth, taps=taps, a=None, a_panel=0, a_row=1, a_k=mr, b=None,
        b_panel=nr, b_outer=plane, b_padded=False, c=None, ldc=plane, mr=mr, nr=nr,
    )  # fmt: skip
    return gemm, m_panels


def test_few_row_panels_read_b_in_place():
    """In place: MobileNetV2's 144 -> 24 projection (5 row panels, K = 144). Packed: many
    row panels, a panel of a K block past half of L1 (K = 144 x 32 columns: 18 KiB), or a
    depth of 32, or rows that crowd a few L1 sets (a 56x56 plane apart: 16 of 64 sets).
    Deep K counts by its blocks: 16 columns of a 256-step block are 16 KiB."""
    assert _few_readers(*_gemm(5, 144))
    assert not _few_readers(*_gemm(20, 144))
    assert not _few_readers(*_gemm(5, 144, nr=32))
    assert _few_readers(*_gemm(5, 1000))
    assert _few_readers(*_gemm(5, 144, plane=28 * 28))
    assert not _few_readers(*_gemm(5, 96, plane=56 * 56))
    assert not _few_readers(*_gemm(4, 32))


def test_avx512_reads_b_in_place_for_close_rows_few_panels_or_shallow_products():
    """In place on AVX-512: MobileNetV2's 14x14 and 7x7 projections (rows 784 and 196 bytes
    apart, 8-24 row panels of 8), its 28x28 projections (4 row panels; rows on pages of
    their own, prefetched a panel ahead) and shallow products of up to four row panels (its
    first convolution: 27 k over 32 channels, nine taps on phase planes). Packed: the 14x14
    and 7x7 expansions (48-120 row panels), a 28x28 product of more row panels, rows a
    56x56 plane apart (a quarter of L1's sets), a shallow product of many row panels (24 ->
    144 on 56x56: 18)."""
    assert _in_place_avx512(*_gemm(8, 384, nr=48, plane=14 * 14, mr=8))
    assert _in_place_avx512(*_gemm(24, 576, nr=48, plane=7 * 7, mr=8))
    assert _in_place_avx512(*_gemm(4, 192, nr=48, plane=28 * 28, mr=8))
    assert _in_place_avx512(*_gemm(4, 3, nr=48, plane=113 * 113, mr=8, taps=tuple(range(9))))
    assert not _in_place_avx512(*_gemm(48, 64, nr=48, plane=14 * 14, mr=8))
    assert not _in_place_avx512(*_gemm(5, 192, nr=48, plane=28 * 28, mr=8))
    assert not _in_place_avx512(*_gemm(3, 144, nr=48, plane=56 * 56, mr=8))
    assert not _in_place_avx512(*_gemm(18, 24, nr=48, plane=56 * 56, mr=8))


def test_far_rows_read_in_place_are_prefetched_a_panel_ahead():
    """The next column panel is prefetched by a main tile of an AVX-512 product whose B is
    read in place a 28x28 plane a row apart, not where rows share pages (14x14), not on
    AVX2, not in an edge tile."""
    far, _ = _gemm(4, 192, nr=48, plane=28 * 28, mr=8)
    close, _ = _gemm(8, 384, nr=48, plane=14 * 14, mr=8)
    assert far.b_far_rows_in_place and not close.b_far_rows_in_place
    assert _prefetches_b(far, 8, 48, AVX512.accumulators)
    assert not _prefetches_b(close, 8, 48, AVX512.accumulators)
    assert not _prefetches_b(far, 8, 48, AVX2.accumulators)
    assert not _prefetches_b(far, 4, 48, AVX512.accumulators)


def test_few_row_panels_pack_one_column_panel_at_a_time_from_cache():
    """An AVX-512 product of at most four row panels whose B (all images) fits in cache packs
    one column panel at a time (MobileNetV2's 144 -> 24 projection on 56x56 at batch 1: 1.8
    MB); at batch 8 (14.5 MB), with more row panels, on AVX2, or without packing it keeps
    the group of six (or one, with nothing packed)."""
    single, panels = _gemm(3, 144, nr=48, plane=56 * 56, mr=8)
    assert _panels_per_group(single, True, panels, AVX512.accumulators) == 1
    batch = dataclasses.replace(single, images=8)
    assert _panels_per_group(batch, True, panels, AVX512.accumulators) == GROUP
    five, more = _gemm(5, 144, nr=48, plane=56 * 56, mr=8)
    assert _panels_per_group(five, True, more, AVX512.accumulators) == GROUP
    assert _panels_per_group(single, True, panels, AVX2.accumulators) == GROUP
    assert _panels_per_group(single, False, panels, AVX512.accumulators) == 1


# (batch, channels, height, width, out channels, kernel, stride, pad): phase-plane convolutions
# stored straight into the output (``conv._straight_gemm``) where there is no compress.
PHASED = [
    (2, 3, 70, 67, 32, 3, 2, 1),  # MobileNetV2's first layer, odd: 34 output columns, a grid of 35
    (1, 3, 75, 80, 20, 7, 2, 3),  # ResNet's stem shape: 40 columns of 43, 20 rows (4 x 5)
    (3, 24, 12, 12, 40, 1, 2, 0),  # 1x1 stride 2 on an even plane: the grid is the output
]


@pytest.mark.parametrize("registers", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("shape", PHASED, ids=["x".join(map(str, s)) for s in PHASED])
def test_phased_rows_match_onnx_reference(shape, epilogue, threads, registers, monkeypatch, tmp_path):
    """Each output row is an image of the GEMM; the chain (a residual too) is applied at
    the plane's position, not the row's."""
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_backend, "register_file", lambda *target: registers)
    seed = sum(shape) * 17 + EPILOGUES.index(epilogue) * 5 + threads
    model, feeds, output = conv_model((*shape, 1), epilogue, seed)
    expected = ReferenceEvaluator(model).run(None, {k: v.astype(np.float64) for k, v in feeds.items()})[0]
    options = {"threads": threads, "parallel_work": 0, "winograd": False}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert relative_error(got, expected) < TOLERANCE[ElemKind.float32]


@pytest.mark.parametrize("cpu", ["emeraldrapids", "znver3"])
def test_edge_tiles_and_row_gemms_compile_for_avx512_and_avx2_cpus(cpu, tmp_path):
    """The chained edge tiles, the column tails and the per-row GEMMs compile for an AVX-512
    and an AVX2 CPU (LLVM's vectorizer aborted the process on some loops for AVX-512
    targets: test_cpu_pool_window.py). In a child process, so an abort fails this test only."""
    from bundle_helpers import onnx_models_compile_for_cpu_in_a_child

    shapes = [
        ((1, 99, 7, 7, 21, 1, 1, 0, 1), "bias_clip"),
        ((2, 3, 70, 67, 32, 3, 2, 1, 1), "bias_residual_relu"),
        ((1, 40, 6, 6, 24, 1, 1, 0, 1), "bias_clip"),  # 8- and 16-lane column tails
    ]
    models = [conv_model(shape, epilogue, index)[0] for index, (shape, epilogue) in enumerate(shapes)]
    onnx_models_compile_for_cpu_in_a_child(models, tmp_path, cpu)


@pytest.mark.parametrize("registers", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_b_with_taps_keeps_every_k_step(threads, registers, monkeypatch, tmp_path):
    """A 9x9 convolution of 9 channels into 12 (depth 729, several K blocks): B's panels are
    packed per K block, and the packed tile's ``depth`` used to say 9 (the taps dropped, the
    channels kept), so a 3-chain edge tile (2 rows: 12 = 2 x 5 + 2 on AVX2) took 9 % 3 == 0
    for "no remainder steps" and skipped the last k of every block (relative error 0.07; the
    conformance case Convolution[float32-1x9x24x24_12x9x9x9], seed 1044707326)."""
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_backend, "register_file", lambda *target: registers)
    model, feeds, output = conv_model((1, 9, 24, 24, 12, 9, 1, 0, 1), "none", 1044707326 % 10007 + threads)
    options = {"threads": threads, "parallel_work": 0, "winograd": False}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    (want,) = ReferenceEvaluator(model).run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    assert relative_error(got, want) < TOLERANCE[ElemKind.float32]
