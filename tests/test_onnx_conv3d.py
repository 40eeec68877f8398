"""3-D Conv and ConvTranspose (one grouped 2-D Convolution over stacked depth taps) and
MaxPool on integer images, against onnxruntime on seeded random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto
from onnx_cases import check, normal, one

CASES_3D: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), {}),
    ((2, 4, 5, 5, 4), (6, 2, 3, 2, 2), {"group": 2, "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 3, 7, 6, 5), (2, 3, 2, 2, 3), {"dilations": [2, 1, 2], "pads": [1, 1, 1, 2, 0, 1]}),
    ((1, 2, 5, 6, 4), (4, 2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 1]}),
    ((1, 2, 5, 5, 5), (2, 2, 2, 2, 2), {"auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES_3D)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_3d(rng: np.random.Generator, x_shape: tuple, w_shape: tuple, attrs: dict, bias: bool) -> None:
    x = normal(rng, *x_shape)
    inits = {"w": normal(rng, *w_shape)}
    if bias:
        inits["b"] = normal(rng, w_shape[0])
    check(one("Conv", ["x", *inits], {"x": x}, inits=inits, **attrs), {"x": x})


TRANSPOSE_3D: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 1, 3, 4, 5), (1, 2, 3, 3, 3), {}),  # onnx's own node test
    ((2, 4, 3, 2, 3), (4, 3, 2, 3, 2), {"group": 2, "strides": [2, 1, 3]}),
    ((1, 2, 3, 3, 2), (2, 2, 3, 2, 2), {"strides": [2, 2, 2], "pads": [1, 0, 1, 0, 1, 0]}),
    (
        (1, 2, 3, 3, 3),
        (2, 3, 2, 2, 2),
        {"strides": [2, 3, 2], "output_padding": [1, 2, 0], "dilations": [1, 2, 1]},
    ),
    ((1, 3, 2, 3, 2), (3, 2, 3, 3, 2), {"strides": [2, 2, 2], "output_shape": [5, 6, 4]}),
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), {"strides": [2, 2, 2], "auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), TRANSPOSE_3D)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_3d(
    rng: np.random.Generator, x_shape: tuple, w_shape: tuple, attrs: dict, bias: bool
) -> None:
    x = normal(rng, *x_shape)
    inits = {"w": normal(rng, *w_shape)}
    if bias:
        inits["b"] = normal(rng, w_shape[1] * attrs.get("group", 1))
    check(one("ConvTranspose", ["x", *inits], {"x": x}, inits=inits, **attrs), {"x": x})


def test_conv_transpose_3d_runtime_weights(rng: np.random.Generator) -> None:
    """Weights computed at run time take the graph path of the filter flip, not numpy's."""
    feeds = {"x": normal(rng, 1, 4, 3, 3, 2), "w": normal(rng, 4, 1, 2, 3, 2)}
    check(one("ConvTranspose", ["x", "w"], feeds, group=2, strides=[2, 1, 2]), feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
def test_maxpool_on_integers(rng: np.random.Generator, dtype: type) -> None:
    """Pads never win: they take the kind's lowest value, not 0 (which would beat int8 negatives)."""
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -100), min(info.max, 250), (2, 3, 6, 7)).astype(dtype)
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int32: TensorProto.INT32}[dtype]
    model = one(
        "MaxPool",
        ["x"],
        {"x": x},
        outputs={"y": elem},
        kernel_shape=[3, 3],
        pads=[1, 1, 2, 2],
        strides=[2, 1],
    )
    check(model, {"x": x}, engines=("ref",) if dtype is np.int32 else ("ort", "ref"))
