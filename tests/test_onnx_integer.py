"""MatMulInteger, ConvInteger and QLinearConv against onnxruntime on seeded random 8-bit data:
integer results must be exact, and requantized ones equal."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx_cases import check, one

from glow_core.frontends.onnx import load_onnx
from glow_core.lowering.evaluate import evaluate

I32 = TensorProto.INT32


def _bytes(rng: np.random.Generator, dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_matmul_integer(rng, dtype):
    a, b = _bytes(rng, dtype, 2, 5, 40), _bytes(rng, dtype, 40, 7)
    feeds = {"a": a, "b": b, "a_zero": _bytes(rng, dtype), "b_zero": _bytes(rng, dtype)}
    check(one("MatMulInteger", ["a", "b", "a_zero", "b_zero"], feeds, outputs={"y": I32}), feeds)


def test_matmul_integer_per_row_and_column_zero_points(rng):
    """[M] zero points for A's rows, [N] for B's columns, as the spec says (onnxruntime
    refuses them; onnx.reference broadcasts A's along K), against exact int64 numpy."""
    a, b = _bytes(rng, np.uint8, 5, 40), _bytes(rng, np.uint8, 40, 7)
    a_zero, b_zero = _bytes(rng, np.uint8, 5), _bytes(rng, np.uint8, 7)
    feeds = {"a": a, "b": b, "a_zero": a_zero, "b_zero": b_zero}
    module = load_onnx(one("MatMulInteger", list(feeds), feeds, outputs={"y": I32}))
    got = evaluate(module, feeds)["y"]
    wide = (a.astype(np.int64) - a_zero[:, None].astype(np.int64)) @ (
        b.astype(np.int64) - b_zero.astype(np.int64)
    )
    np.testing.assert_array_equal(got, wide.astype(np.int32))


@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_integer(rng, per_channel):
    x, w = _bytes(rng, np.uint8, 1, 3, 9, 8), _bytes(rng, np.uint8, 4, 3, 3, 3)
    feeds = {
        "x": x,
        "w": w,
        "x_zero": _bytes(rng, np.uint8),
        "w_zero": _bytes(rng, np.uint8, *((4,) if per_channel else ())),
    }
    model = one("ConvInteger", list(feeds), feeds, outputs={"y": I32}, pads=[1, 0, 1, 2], strides=[2, 1])
    check(model, feeds, engines=("ref",) if per_channel else ("ort", "ref"))


def test_qlinear_conv(rng):
    """Weights in [-64, 63]: onnxruntime's u8s8 kernels on x86 CPUs without VNNI sum pairs of
    u8*s8 products in saturating int16 (vpmaddubsw), so full-range weights make the oracle
    itself wrong there; within this range every pair sum fits and both references are exact."""
    x = _bytes(rng, np.uint8, 1, 4, 7, 7)
    w = rng.integers(-64, 64, (6, 2, 3, 3)).astype(np.int8)
    feeds = {
        "x": x,
        "x_scale": np.float32(0.02),
        "x_zero": np.uint8(128),
        "w": w,
        "w_scale": rng.uniform(0.001, 0.01, 6).astype(np.float32),
        "w_zero": np.zeros(6, np.int8),
        "y_scale": np.float32(0.5),
        "y_zero": np.uint8(100),
        "bias": rng.integers(-500, 500, 6).astype(np.int32),
    }
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    model = one(
        "QLinearConv", list(feeds), feeds, outputs={"y": TensorProto.UINT8}, pads=[1, 1, 1, 1], group=2
    )
    check(model, feeds, engines=("ort", "ref"))


def test_integer_ops_refuse_wider_operands(rng):
    from glow_core.errors import UnsupportedOpError

    feeds = {
        "a": rng.integers(0, 9, (3, 4)).astype(np.int32),
        "b": rng.integers(0, 9, (4, 2)).astype(np.int32),
    }
    with pytest.raises(UnsupportedOpError, match="int8/uint8"):
        check(one("MatMulInteger", ["a", "b"], feeds, outputs={"y": I32}), feeds)
