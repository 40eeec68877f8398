"""Depthwise convolutions (one input channel per group) against a float64 numpy reference:
the in-place kernel (strides 1 and 2: edge chunks peeled with masked loads, filter rows
outside the plane zeroed) and the phase-plane one (dilations), over odd sizes, symmetric and
asymmetric pads, 3x3 and 5x5 filters, a channel multiplier, 1 and 2 threads, with the fused
chains MobileNet uses (bias + ReLU6, a residual add) and none. The runtime poisons outputs
before each run, so an element no kernel wrote shows up as non-finite."""

from __future__ import annotations

import numpy as np
import pytest
from glow_conformance.compare import TOLERANCE
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

# (batch, channels, height, width, multiplier, kernel, stride, pads (top, left, bottom, right), dilation)
CASES = [
    (1, 8, 7, 7, 1, 3, 1, (1, 1, 1, 1), 1),  # MobileNet's 7x7 planes: one peeled chunk per row
    (2, 5, 13, 11, 1, 3, 2, (1, 1, 1, 1), 1),  # odd sizes, stride 2
    (1, 3, 40, 37, 1, 3, 2, (0, 1, 1, 0), 1),  # asymmetric pads
    (1, 4, 9, 70, 1, 3, 1, (0, 0, 0, 0), 1),  # no padding; interior chunks and a tail
    (1, 3, 12, 75, 1, 3, 2, (1, 1, 1, 1), 1),  # stride 2 over 38 columns: whole and partial chunks
    (1, 6, 20, 70, 1, 5, 2, (2, 2, 2, 2), 1),  # 5x5
    (1, 3, 11, 21, 1, 3, 2, (2, 2, 2, 2), 1),  # a filter row wholly in the padding
    (1, 4, 10, 18, 2, 3, 1, (1, 1, 1, 1), 1),  # channel multiplier 2
    (1, 2, 5, 1, 1, 3, 1, (1, 1, 1, 1), 1),  # one column
    (1, 4, 15, 33, 1, 3, 1, (2, 2, 2, 2), 2),  # dilated: the phase-plane kernel
    (1, 5, 17, 19, 1, 3, 3, (1, 1, 1, 1), 1),  # stride 3: the phase-plane kernel
]
EPILOGUES = ["none", "bias_clip", "bias_residual_relu"]


def _case_id(case) -> str:
    return "x".join(map(str, case[:7])) + "p" + "".join(map(str, case[7])) + f"d{case[8]}"


def _output_size(size: int, kernel: int, stride: int, before: int, after: int, dilation: int) -> int:
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def _model(case, epilogue: str, rng: np.random.Generator):
    n, c, h, w, mult, k, s, pads, d = case
    oh = _output_size(h, k, s, pads[0], pads[2], d)
    ow = _output_size(w, k, s, pads[1], pads[3], d)
    weight = rng.standard_normal((c * mult, 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(c * mult).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": list(pads), "group": c, "dilations": [d, d]}
    nodes = [helper.make_node("Conv", ["x", "w"] if epilogue == "none" else ["x", "w", "b"], ["y0"], **attrs)]
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    if epilogue == "bias_clip":
        inits += [
            numpy_helper.from_array(np.float32(0.0), "lo"),
            numpy_helper.from_array(np.float32(6.0), "hi"),
        ]
        nodes.append(helper.make_node("Clip", ["y0", "lo", "hi"], ["y"]))
    elif epilogue == "bias_residual_relu":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, c * mult, oh, ow]))
        feeds["r"] = rng.standard_normal((n, c * mult, oh, ow)).astype(np.float32)
        nodes += [helper.make_node("Add", ["y0", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["y0"], ["y"]))
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c * mult, oh, ow])]
    model = helper.make_model(
        helper.make_graph(nodes, "depthwise", inputs, out, inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    return model, feeds, weight, bias, (oh, ow)


def _reference(case, epilogue, feeds, weight, bias, out_hw) -> np.ndarray:
    """The depthwise convolution and its chain in float64, tap by tap over the padded input."""
    n, c, _, _, mult, k, s, pads, d = case
    oh, ow = out_hw
    x = np.pad(feeds["x"].astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    x = np.repeat(x, mult, axis=1)  # output channel co reads input channel co // mult
    y = np.zeros((n, c * mult, oh, ow))
    for i in range(k):
        for j in range(k):
            window = x[:, :, i * d : i * d + s * (oh - 1) + 1 : s, j * d : j * d + s * (ow - 1) + 1 : s]
            y += window * weight[:, 0, i, j].astype(np.float64)[None, :, None, None]
    if epilogue == "bias_clip":
        y = np.clip(y + bias[None, :, None, None], 0.0, 6.0)
    elif epilogue == "bias_residual_relu":
        y = np.maximum(y + bias[None, :, None, None] + feeds["r"], 0.0)
    return y


def check_against_float64(case, epilogue: str, threads: int, rng: np.random.Generator) -> None:
    """Compile ``case`` on cpu, run it once (outputs poisoned first), and compare with the
    float64 reference at the conformance tolerance."""
    model, feeds, weight, bias, out_hw = _model(case, epilogue, rng)
    compiled = glow_core.compile(model, backend="cpu", options={"threads": threads, "parallel_work": 0})
    got = compiled.run(feeds)["y"]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    expected = _reference(case, epilogue, feeds, weight, bias, out_hw)
    assert np.abs(expected).max() > 0
    assert relative_error(got, expected) <= TOLERANCE[ElemKind.float32]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_depthwise_matches_float64_reference(case, epilogue, threads, rng):
    check_against_float64(case, epilogue, threads, rng)
