"""Reshapes sunk below element-wise work: a transformer dense layer's bias and GELU fuse
into its MatMul, and the results stay those of onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from glow_cpu.backend import CpuBackend
from glow_cpu.fusion import plan_fusion
from glow_cpu.reshape_sinking import _broadcast_source_shape, _groups
from onnx import numpy_helper

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo.layers import INPUT_NAME, GraphBuilder, gelu, linear
from glow_core.pipeline.steps import load_model
from glow_core.runtime.pipeline import compile_stages

pytest.importorskip("onnxruntime")


def _dense_gelu(batch: int, per_image: bool = False):
    """x[batch, 24, 32] @ w + bias -> GELU -> @ w2 + bias2 (+ a per-image offset): the
    rank-3 MatMuls an exporter writes for a transformer's feed-forward block."""
    b = GraphBuilder(seed=3)
    y = gelu(b, linear(b, INPUT_NAME, "fc1", 32, 48), "gelu")
    y = linear(b, y, "fc2", 48, 32)
    if per_image:  # a broadcast whose pattern a [batch*24, 32] reshape cannot keep
        y = b.node("Add", [y, b.normal("offset", [batch, 1, 1], 1.0)], "offset")
    return b.build("dense_gelu", [batch, 24, 32], y, [batch, 24, 32])


@pytest.mark.parametrize("batch", [1, 3])
def test_dense_layer_biases_fuse_into_the_matmul(batch):
    stages = compile_stages(load_model(_dense_gelu(batch)), CpuBackend())
    plan = plan_fusion(stages.ir)
    matmuls = [i for i in stages.ir.instrs if i.kind == "MatMul"]
    assert len(matmuls) == 2
    epilogues = [[op.kind for op in plan.epilogues.get(id(m), [])] for m in matmuls]
    assert epilogues == [["Add", "Gelu"], ["Add"]]  # GELU is kept whole, one operation
    materialized = [i.name for i in stages.ir.instrs if i.kind == "Broadcast" and id(i) not in plan.skipped]
    assert not any("fc" in name for name in materialized), materialized


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("per_image", [False, True])
def test_sunk_reshapes_keep_onnxruntime_results(batch, per_image, registry):
    model = _dense_gelu(batch, per_image)
    x = np.random.default_rng(batch).standard_normal((batch, 24, 32)).astype(np.float32)
    got = glow_core.compile(model, backend="cpu", options={"threads": 1}).run({INPUT_NAME: x})
    assert max_relative_error(got, onnxruntime_outputs(model, {INPUT_NAME: x})) < 1e-5


def _dense_residual(batch: int):
    """x[batch, 24, 32] @ w + bias + x: a transformer's output projection and its residual,
    whose sum a LayerNorm reads next."""
    b = GraphBuilder(seed=5)
    y = b.node("Add", [INPUT_NAME, linear(b, INPUT_NAME, "proj", 32, 32)], "residual")
    y = b.node("Mul", [y, b.scalar(0.5)], "half")  # a reader of the sum: it stays fused too
    return b.build("dense_residual", [batch, 24, 32], y, [batch, 24, 32])


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_residual_add_fuses_into_the_dense_layer(batch, threads, registry):
    """The residual, a full-size operand (reshaped like the product: a view of the input),
    is read by the MatMul's epilogue: one kernel, and the result is that of float64."""
    model = _dense_residual(batch)
    stages = compile_stages(load_model(model), CpuBackend())
    plan = plan_fusion(stages.ir)
    (matmul,) = [i for i in stages.ir.instrs if i.kind == "MatMul"]
    assert [op.kind for op in plan.epilogues.get(id(matmul), [])] == ["Add", "Add", "Mul"]

    x = np.random.default_rng(batch).standard_normal((batch, 24, 32)).astype(np.float32)
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    x64 = x.astype(np.float64)
    want = 0.5 * (x64 + x64 @ weights["proj.weight"] + weights["proj.bias"])
    compiled = glow_core.compile(model, backend="cpu", options={"threads": threads})
    got = next(iter(compiled.run({INPUT_NAME: x}).values())).astype(np.float64)
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-6


def test_reshape_runs_pair_dimensions_of_equal_products():
    assert _groups((8, 128, 256), (1024, 256)) == [(range(0, 2), range(0, 1)), (range(2, 3), range(1, 2))]
    assert _groups((2, 3), (3, 2)) == [(range(0, 2), range(0, 2))]


@pytest.mark.parametrize(
    ("source", "out", "target", "expected"),
    [
        ((1, 1, 256), (8, 128, 256), (1024, 256), (1, 256)),  # a bias
        ((256,), (1, 128, 256), (128, 256), (1, 256)),  # a bias of lower rank
        ((8, 128, 1), (8, 128, 256), (1024, 256), (1024, 1)),  # one value per row
        ((1, 1, 1, 1), (1, 4, 128, 128), (4, 128, 128), (1, 1, 1)),  # a scale
        ((8, 1, 1), (8, 128, 256), (1024, 256), None),  # per image: rows of 128 would mix
        ((1, 3), (2, 3), (3, 2), None),  # a reshape that moves the broadcast dimension
    ],
)
def test_broadcast_source_shape_after_a_reshape(source, out, target, expected):
    assert _broadcast_source_shape(source, out, target) == expected
