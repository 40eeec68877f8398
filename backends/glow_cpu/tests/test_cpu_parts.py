"""Finer work split (``CpuOptions.parts_per_thread``): every parallel phase cut into
``threads * parts_per_thread`` parts that the threads claim as they come free.

Every kernel splits its *output* between parts (a part computes whole elements, never a
share of one element's sum), but for the 1x1 convolutions two parts cut by depth
(``conv_depth_split.py``), whose two blocks of depth are added in the same order at every
part count; and the kernels whose plan depends on the part count (GEMM block order,
Winograd units, blocked convolution by image or by rows, BatchMatMul by entry) keep each
element's summation order. So the results are **bit-equal** to one thread for every part
count, which is what these tests assert, beside the float64 / onnxruntime oracle within
the conformance tolerance. The runtime poisons outputs with NaN before each run, so an
element that no part wrote shows as non-finite.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import conv_model, dense_block, one_primitive_ir, pool_model
from glow_conformance.compare import TOLERANCE
from glow_cpu.backend import CpuBackend, CpuOptions, cache_key
from glow_cpu.codegen import build_program
from glow_cpu.kernels import winograd
from onnx import reference

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs, relative_error
from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import compile_stages
from glow_core.types import ElemKind, Type

PARTS = [1, 3, 4]
F32_TOLERANCE = TOLERANCE[ElemKind.float32]


def _options(threads: int, parts: int = 1, **more) -> dict:
    """Every kernel shared (``parallel_work`` 0), so even small layers are cut into parts."""
    return {"threads": threads, "parts_per_thread": parts, "parallel_work": 0, "cache": False, **more}


def _run(model, feeds: dict[str, np.ndarray], threads: int, parts: int = 1, **more) -> dict[str, np.ndarray]:
    compiled = glow_core.compile(model, backend="cpu", options=_options(threads, parts, **more))
    got = compiled.run(feeds)
    for name, value in got.items():
        assert np.isfinite(value).all(), f"{name}: an element no part wrote kept its poison"
    return got


def _assert_bit_equal(got: dict[str, np.ndarray], one: dict[str, np.ndarray], what: str) -> None:
    for name in one:
        assert np.array_equal(got[name], one[name]), f"{what}: {name} differs from the 1-thread result"


MODEL_NAMES = ["small_cnn", "resnet_bottleneck", "mobilenetv2_block", "transformer_encoder"]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_models_with_parts_equal_one_thread(name, registry):
    model = MODELS[name]()
    feeds = random_inputs(model, seed=1)
    one = _run(model, feeds, threads=1)
    assert max_relative_error(one, onnxruntime_outputs(model, feeds)) < 1e-4
    for parts in PARTS:
        _assert_bit_equal(_run(model, feeds, 2, parts), one, f"{name}, threads 2 x {parts} parts")


# (batch, channels, height, width, out channels, kernel, stride, pad, group)
CONVS = [
    (1, 32, 14, 14, 48, 1, 1, 0, 1),  # 1x1: a GEMM over the plane
    (1, 16, 13, 11, 32, 3, 2, 1, 1),  # strided 3x3
    (4, 16, 10, 10, 16, 3, 1, 1, 1),  # a batch the parts share by image (or not, by count)
    (3, 32, 9, 9, 32, 3, 1, 1, 1),  # a batch no part count divides
    (1, 24, 12, 12, 24, 3, 1, 1, 24),  # depthwise
]


@pytest.mark.parametrize("shape", CONVS)
def test_convolutions_with_parts_equal_one_thread(shape, registry):
    model, feeds, output = conv_model(shape, "bias_residual_relu", seed=sum(shape) * 7919)
    one = _run(model, feeds, threads=1, winograd=False)
    expected = reference.ReferenceEvaluator(model).run(None, feeds)[0]
    assert relative_error(one[output], expected) <= F32_TOLERANCE
    for parts in PARTS:
        got = _run(model, feeds, 2, parts, winograd=False)
        _assert_bit_equal(got, one, f"Conv {shape}, threads 2 x {parts} parts")


@pytest.mark.parametrize("shape", [(1, 32, 14, 14, 32, 3, 1, 1, 1), (2, 16, 9, 12, 24, 3, 1, 1, 1)])
def test_winograd_units_with_parts_equal_one_thread(shape, registry, monkeypatch):
    """The Winograd plan cuts rows of tiles into at least as many units as parts."""
    monkeypatch.setattr(winograd, "preferred", lambda g, parts=1, accumulators=24: (2,))
    monkeypatch.setattr(winograd, "accurate_enough", lambda m, cin: True)
    ran: list[str] = []
    emit = winograd.emit_winograd
    monkeypatch.setattr(winograd, "emit_winograd", lambda k, g, v: (ran.append(v.name), emit(k, g, v)))
    model, feeds, output = conv_model(shape, "bias_relu", seed=sum(shape) * 31)
    one = _run(model, feeds, threads=1)
    expected = reference.ReferenceEvaluator(model).run(None, feeds)[0]
    assert relative_error(one[output], expected) <= F32_TOLERANCE
    for parts in PARTS:
        _assert_bit_equal(_run(model, feeds, 2, parts), one, f"Winograd {shape}, threads 2 x {parts} parts")
    assert len(ran) == 1 + len(PARTS), "Winograd was not used"


@pytest.mark.parametrize(("rows", "inputs", "outputs"), [(1, 512, 1000), (37, 300, 130), (256, 64, 48)])
def test_gemm_with_parts_equal_one_thread(rows, inputs, outputs, registry, rng):
    """Fully connected layers: the split over column panels, or row panels when they are more."""
    seed = int(rng.integers(1 << 31))
    model = dense_block(np.random.default_rng(seed), rows, inputs, outputs)
    drawn = np.random.default_rng(seed)  # the weights dense_block drew, again
    w = (drawn.standard_normal((inputs, outputs)).astype(np.float32) * 0.2).astype(np.float64)
    bias = drawn.standard_normal(outputs).astype(np.float32).astype(np.float64)
    feeds = {"x": rng.standard_normal((rows, inputs)).astype(np.float32)}
    one = _run(model, feeds, threads=1)
    expected = 0.5 * np.tanh(feeds["x"].astype(np.float64) @ w + bias)
    assert relative_error(one["y"], expected) <= F32_TOLERANCE
    for parts in PARTS:
        got = _run(model, feeds, 2, parts)
        _assert_bit_equal(got, one, f"GEMM {rows}x{inputs}x{outputs}, threads 2 x {parts} parts")


@pytest.mark.parametrize("batch", [2, 5, 8])
def test_batch_matmul_with_parts_equal_one_thread(batch, rng):
    """Entries split between parts when there is one per part, else each GEMM split."""
    types = [Type((batch, 19, 70)), Type((batch, 70, 33))]
    ir_for = lambda: one_primitive_ir("BatchMatMul", types, {})  # noqa: E731
    feeds = {f"in{i}": rng.standard_normal(t.shape).astype(np.float32) for i, t in enumerate(types)}
    expected = np.matmul(feeds["in0"].astype(np.float64), feeds["in1"].astype(np.float64))
    one = CpuBackend().compile(ir_for(), CpuOptions(**_options(1))).run(feeds)["out"]
    assert relative_error(one, expected) <= F32_TOLERANCE
    for parts in PARTS:
        got = CpuBackend().compile(ir_for(), CpuOptions(**_options(2, parts))).run(feeds)["out"]
        assert np.isfinite(got).all() and np.array_equal(got, one), f"batch {batch} x {parts} parts"


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_with_parts_equal_one_thread(op, rng):
    shape, window = (2, 24, 15, 15), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    model = pool_model(op, shape, **window)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    one = _run(model, feeds, threads=1)
    expected = reference.ReferenceEvaluator(model).run(None, feeds)[0]
    assert relative_error(one["y"], expected) <= F32_TOLERANCE
    for parts in PARTS:
        _assert_bit_equal(_run(model, feeds, 2, parts), one, f"{op} x {parts} parts")


def test_parts_change_the_code_and_the_cache_key(rng):
    """The part count is in the claim loops' bound, so it is in the object cache's key; the
    kernels still share code within a program (``check_sharing`` proves the key complete)."""
    stages = compile_stages(MODELS["resnet_bottleneck"](), CpuBackend())
    texts = {
        parts: build_program(stages.ir, 2, False, 0, check_sharing=True, parts_per_thread=parts).llvm_ir
        for parts in PARTS
    }
    assert len(set(texts.values())) == len(PARTS)
    keys = {cache_key(stages.ir, CpuOptions(threads=2, parts_per_thread=p), "target") for p in PARTS}
    assert len(keys) == len(PARTS)


def test_parts_do_not_change_single_thread_code(rng):
    """One thread runs every phase as one part whatever ``parts_per_thread`` says."""
    stages = compile_stages(MODELS["small_cnn"](), CpuBackend())
    one, four = (build_program(stages.ir, 1, False, 0, parts_per_thread=p).llvm_ir for p in (1, 4))
    assert one == four


@pytest.mark.parametrize("value", [0, -2, 65, "many"])
def test_bad_parts_per_thread_is_refused(value, registry):
    with pytest.raises(GlowError, match="parts_per_thread"):
        glow_core.compile(MODELS["mlp"](), backend="cpu", options={"parts_per_thread": value})
