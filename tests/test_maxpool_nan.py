"""MaxPool over windows holding NaN: NaN never wins a window, and a window is NaN only when
every element it covers is (the primitive's rule, as onnx.reference's MaxPool skips NaN).

Each backend's every MaxPool code path runs here: glow-cpu's float32 vector kernel with a
phase-split scratch (padding) and in place (no padding), its scalar loop (float16,
float64), and the OpenCL kernel. The oracle is a plain float64 loop over the windows, not
the primitive's reference, so a wrong reference would show too. Inputs are seeded random
normals with about a third NaN and one block of NaN wide enough to fill a whole window.
"""

from __future__ import annotations

import numpy as np
import pytest
from installed_backends import install_backend
from onnx import helper

import glow_core
from glow_core.errors import UnsupportedOpError

CASES = {
    "f32-pads": (np.float32, (3, 3), (2, 2), (1, 1, 1, 1)),
    "f32-in-place": (np.float32, (2, 2), (2, 2), (0, 0, 0, 0)),
    "f32-asymmetric": (np.float32, (2, 3), (1, 2), (0, 1, 1, 2)),
    "f16-pads": (np.float16, (3, 3), (2, 2), (1, 1, 1, 1)),
    "f64-pads": (np.float64, (3, 2), (2, 1), (1, 0, 0, 1)),
}


@pytest.fixture(params=["interpreter", "cpu", "opencl"])
def backend(request: pytest.FixtureRequest, install_registry) -> str:
    return install_backend(install_registry, request.param)


def _oracle(x: np.ndarray, kernel, strides, pads) -> np.ndarray:
    """Window by window in float64: the largest number among the covered elements, NaN when
    there is none."""
    n, c, h, w = x.shape
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            top, left = i * strides[0] - pads[0], j * strides[1] - pads[1]
            rows = slice(max(top, 0), min(top + kernel[0], h))
            cols = slice(max(left, 0), min(left + kernel[1], w))
            window = x[:, :, rows, cols].astype(np.float64).reshape(n, c, -1)
            numbers = np.where(np.isnan(window), -np.inf, window).max(axis=2)
            out[:, :, i, j] = np.where(np.isnan(window).all(axis=2), np.nan, numbers)
    return out


def _model(dtype, shape, kernel, strides, pads):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides, pads=pads)
    graph = helper.make_graph(
        [node],
        "maxpool_nan",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("case", CASES)
def test_nan_never_wins_a_window(case: str, backend: str, rng: np.random.Generator) -> None:
    dtype, kernel, strides, pads = CASES[case]
    shape = (2, 3, 9, 21)  # 21 columns: a whole 16-lane vector and a partial one
    x = rng.standard_normal(shape).astype(dtype)
    x[rng.random(shape) < 0.35] = np.nan
    x[:, 1, 2:6, 4:9] = np.nan  # wide enough to cover at least one whole window
    expected = _oracle(x, kernel, strides, pads)
    assert np.isnan(expected).any() and not np.isnan(expected).all(), "the case must mix both"

    model = _model(dtype, shape, kernel, strides, pads).SerializeToString()
    try:
        session = glow_core.load(model, backend=backend)
    except UnsupportedOpError as err:  # opencl declares MaxPool for float32 and integers only
        pytest.skip(f"{backend} does not declare this element kind: {err}")
    got = session.run({"x": x})["y"]

    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=f"{case} on {backend}")
    np.testing.assert_array_equal(got[~np.isnan(got)], expected[~np.isnan(expected)].astype(dtype))
