"""Exactness: a quantized function's result equals a float64 numpy emulation of the
integer arithmetic docs/quantization.md defines (quantize, centered int8 products with
int32 accumulation and bias, requantize half to even, saturate, dequantize), bit for bit,
on the interpreter and on glow-cpu."""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_core import Builder, Module
from glow_core.quantization.calibration import calibrated_range
from glow_core.quantization.schema import SCHEMAS, QuantParams, choose_params, weight_params


def _network(rng) -> Module:
    """input -> Conv(+bias) -> Relu -> Reshape -> FullyConnected, and input2 added to the FC."""
    m = Module()
    fn = m.create_function()
    b = Builder(fn)
    x = b.placeholder("x", (2, 3, 6, 6))
    y = b.placeholder("y", (2, 5))
    channel_scale = np.array([1.0, 3.0, 0.2, 1.0], np.float32).reshape(4, 1, 1, 1)
    w = m.create_constant("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * channel_scale)
    bias = m.create_constant("bias", rng.standard_normal(4).astype(np.float32))
    conv = b.conv(x, w, bias, pads=(1, 1, 1, 1), strides=(2, 2), name="conv")
    relu = b.Relu(conv, name="relu")
    flat = b.reshape(relu, (2, 36), name="flat")
    fw = m.create_constant("fw", rng.standard_normal((36, 5)).astype(np.float32))
    fb = m.create_constant("fb", rng.standard_normal(5).astype(np.float32))
    fc = b.fully_connected(flat, fw, fb, name="fc")
    b.save(b.Add(fc, y, name="sum"), "out")
    return m


def _conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Direct convolution in float64 by explicit windows (the test's own, not glow's)."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    cout, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    for i in range(oh):
        for j in range(ow):
            window = x[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.tensordot(window, w, axes=([1, 2, 3], [1, 2, 3]))
    return out


def _requantize(acc: np.ndarray, multiplier, p: QuantParams) -> np.ndarray:
    return np.clip(np.rint(acc * multiplier) + p.offset, p.qmin, p.qmax)


def _emulate(m: Module, profile, schema: str, per_channel: bool, inputs) -> np.ndarray:
    """The integer arithmetic of the quantized network, in numpy float64."""
    c = m.constants

    def params(name):
        return choose_params(*calibrated_range(profile[name], "minmax"), schema)

    px, py, pconv, pfc, psum = (params(n) for n in ("x", "y", "conv", "fc", "sum"))
    qx = _requantize(inputs["x"].astype(np.float64) / px.scale, 1.0, px)
    sw, qw = weight_params(c["w"].value, 0 if per_channel else None, schema)
    acc_scale = np.broadcast_to(px.scale * sw, (4,))
    acc = _conv2d(qx - px.offset, qw.astype(np.float64), 2, 1)
    acc += np.rint(c["bias"].value.astype(np.float64) / acc_scale).reshape(1, 4, 1, 1)
    q = _requantize(acc, (acc_scale / pconv.scale).reshape(1, 4, 1, 1), pconv)
    q = np.maximum(q, pconv.offset).reshape(2, 36)  # Relu and Reshape keep the parameters
    sfw, qfw = weight_params(c["fw"].value, 1 if per_channel else None, schema)
    fc_scale = np.broadcast_to(pconv.scale * sfw, (5,))
    acc = (q - pconv.offset) @ qfw.astype(np.float64) + np.rint(c["fb"].value.astype(np.float64) / fc_scale)
    qfc = _requantize(acc, (fc_scale / pfc.scale).reshape(1, 5), pfc)
    qy = _requantize(inputs["y"].astype(np.float64) / py.scale, 1.0, py)
    total = (qfc - pfc.offset) * (pfc.scale / psum.scale) + (qy - py.offset) * (py.scale / psum.scale)
    qsum = _requantize(total, 1.0, psum).astype(psum.elem.dtype)
    return (qsum.astype(np.float32) - np.float32(psum.offset)) * np.float32(psum.scale)


@pytest.mark.parametrize(
    ("schema", "per_channel"),
    [(s, False) for s in SCHEMAS] + [("asymmetric", True), ("symmetric-uint8", True)],
)
def test_interpreter_and_cpu_compute_exactly_the_integer_arithmetic(rng, schema, per_channel):
    m = _network(rng)
    calibration = [
        {
            "x": rng.standard_normal((2, 3, 6, 6)).astype(np.float32),
            "y": rng.standard_normal((2, 5)).astype(np.float32),
        }
        for _ in range(3)
    ]
    profile = glow_core.profile(m, calibration, "interpreter")
    mode = glow_core.Quantize(profile, schema=schema, per_channel=per_channel)
    inputs = {
        "x": 1.3 * rng.standard_normal((2, 3, 6, 6)).astype(np.float32),
        "y": rng.standard_normal((2, 5)).astype(np.float32),
    }
    expected = _emulate(m, profile, schema, per_channel, inputs)
    for backend in ("interpreter", "cpu"):
        compiled = glow_core.compile(m, backend, precision=mode)
        np.testing.assert_array_equal(compiled.run(inputs)["out"], expected, err_msg=backend)
    # ... and within the calibrated range it approximates the float function.
    reference = glow_core.compile(m, "interpreter").run(calibration[0])["out"]
    error = np.abs(compiled.run(calibration[0])["out"] - reference).max()
    assert error < 0.05 * np.abs(reference).max()
