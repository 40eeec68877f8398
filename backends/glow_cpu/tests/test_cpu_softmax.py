"""A float32 Softmax over the last axis is one kernel (``kernels/softmax.py``), bit-equal to
the six lowered kernels it replaces and within tolerance of a float64 reference; over
another axis it is still lowered. Rows shorter than a vector, a whole number of vectors and
a masked tail; rows with -inf entries (a masked attention score); 1 and 3 threads. The
runtime poisons outputs before each run, so an element never written shows as non-finite.
"""

from __future__ import annotations

import numpy as np
import pytest
from glow_conformance.compare import TOLERANCE
from glow_cpu.kernels import softmax
from onnx import TensorProto, helper

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

SHAPES = [(2, 7), (3, 5, 16), (2, 4, 37), (1, 130), (4, 2, 128, 128)]


def _model(shape: tuple[int, ...], axis: int):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    graph = helper.make_graph(
        [node],
        "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reference(x: np.ndarray, axis: int) -> np.ndarray:
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _inputs(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    x.reshape(-1, shape[-1])[::3, : max(1, shape[-1] // 4)] = -np.inf  # masked scores
    return x


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_softmax_kernel_is_bit_equal_to_the_lowered_one(shape, threads, monkeypatch, tmp_path):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    model = _model(shape, -1)
    x = _inputs(shape, seed=sum(shape) + threads)
    options = {"threads": threads, "parallel_work": 0, "cache": False}
    fused = glow_core.compile(model, backend="cpu", options=options)
    assert [kind for _, kind in fused.steps] == ["Softmax"]
    got = fused.run({"x": x})["y"]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    assert relative_error(got, _reference(x, -1)) < TOLERANCE[ElemKind.float32]
    monkeypatch.setattr(softmax, "fused", lambda shape, axis: False)
    lowered = glow_core.compile(model, backend="cpu", options=options)
    assert "Softmax" not in [kind for _, kind in lowered.steps]
    np.testing.assert_array_equal(got, lowered.run({"x": x})["y"])


def test_softmax_over_another_axis_is_lowered(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    shape = (2, 9, 5)
    x = _inputs(shape, seed=3)
    compiled = glow_core.compile(_model(shape, 1), backend="cpu", options={"cache": False})
    assert "Softmax" not in [kind for _, kind in compiled.steps]
    expected = _reference(np.where(np.isinf(x), np.float32(-1e30), x), 1)
    got = compiled.run({"x": np.where(np.isinf(x), np.float32(-1e30), x)})["y"]
    assert relative_error(got, expected) < TOLERANCE[ElemKind.float32]


def test_only_the_last_axis_with_elements_is_fused():
    assert softmax.fused((2, 7), -1) and softmax.fused((2, 7), 1)
    assert not softmax.fused((2, 7), 0)
    assert not softmax.fused((0, 7), -1)
