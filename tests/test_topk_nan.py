"""TopK over lines holding NaN: NaN ranks above every number, as numpy sorts it and as
onnxruntime and onnx.reference rank it (the first of the largest, the last of the
smallest), ties in index order. Checked on every backend against onnxruntime and against a
plain float64 oracle built from sorted (value, index) pairs, so a wrong reference shows too.
"""

from __future__ import annotations

import numpy as np
import pytest
from installed_backends import install_backend
from onnx import TensorProto, helper

import glow_core


@pytest.fixture(params=["interpreter", "cpu", "opencl"])
def backend(request: pytest.FixtureRequest, install_registry) -> str:
    return install_backend(install_registry, request.param)


def _model(shape, k: int, axis: int, largest: bool):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=int(largest))
    graph = helper.make_graph(
        [node],
        "topk_nan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("indices", TensorProto.INT64, None),
        ],
        [helper.make_tensor("k", TensorProto.INT64, [1], [k])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _oracle(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    """Per line, the indices sorted by (NaN group, value, index), where NaN is above +inf."""
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty(moved.shape[:-1] + (k,), np.int64)
    for position in np.ndindex(moved.shape[:-1]):
        line = moved[position]

        def key(i: int, line: np.ndarray = line) -> tuple:
            nan = bool(np.isnan(line[i]))
            if largest:
                return (not nan, 0.0 if nan else -line[i], i)
            return (nan, 0.0 if nan else line[i], i)

        out[position] = sorted(range(len(line)), key=key)[:k]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("axis", [1, 0])
def test_nan_ranks_above_every_number(backend: str, largest: bool, axis: int, rng) -> None:
    shape, k = (6, 9), 4
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.3] = np.nan
    x[0, :] = np.nan  # a line of NaN only: index order
    x[:, 2] = np.inf  # +inf beside NaN must still rank below it
    x[1, 5] = -np.inf
    expected = _oracle(x, k, axis, largest)

    model = _model(shape, k, axis, largest)
    got = glow_core.load(model.SerializeToString(), backend=backend).run({"x": x})

    np.testing.assert_array_equal(got["indices"], expected)
    np.testing.assert_array_equal(got["values"], np.take_along_axis(x, expected, axis=axis))
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(["indices"], {"x": x})[0], expected)
