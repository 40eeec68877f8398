"""Independent numpy oracles for the integer layers and the (de)quantization nodes
(glow_core/graph/nodes/quantized.py), written from their documented semantics. They take the
operands as stored (int8/uint8/int32 and float), not widened: the result's range comes from
the kinds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from conv_oracle import conv2d


def _requantized(
    acc: np.ndarray, multiplier: np.ndarray, channel_axis: int, offset: int, low: int, high: int, kind: str
):
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    scaled = np.rint(acc * multiplier.astype(np.float64).reshape(shape))  # rint: half to even
    return np.clip(scaled + offset, low, high).astype(np.dtype(kind))


def quantized_conv(
    x,
    w,
    bias,
    multiplier,
    strides,
    pads,
    dilations,
    group,
    input_offset,
    output_offset,
    output_kind,
    low,
    high,
):
    centered = x.astype(np.float64) - input_offset  # padding is the zero point: 0 once centered
    acc = conv2d(centered, w.astype(np.float64), bias.astype(np.float64), strides, pads, dilations, group)
    return _requantized(acc, multiplier, 1, output_offset, low, high, output_kind)


def quantized_fully_connected(x, w, bias, multiplier, input_offset, output_offset, output_kind, low, high):
    acc = (x.astype(np.float64) - input_offset) @ w.astype(np.float64) + bias.astype(np.float64)
    return _requantized(acc, multiplier, 1, output_offset, low, high, output_kind)


def quantized_add(
    lhs, rhs, lhs_multiplier, rhs_multiplier, lhs_offset, rhs_offset, output_offset, output_kind, low, high
):
    total = (lhs.astype(np.float64) - lhs_offset) * lhs_multiplier + (
        rhs.astype(np.float64) - rhs_offset
    ) * rhs_multiplier
    return np.clip(np.rint(total) + output_offset, low, high).astype(np.dtype(output_kind))


def dequantize_linear(x, scale, zero_point, axis):
    shape = [1] * x.ndim
    if scale.ndim:
        shape[axis] = -1
    centered = x.astype(np.float64) - zero_point.astype(np.float64).reshape(shape if zero_point.ndim else ())
    return (centered * scale.astype(np.float64).reshape(shape if scale.ndim else ())).astype(np.float32)


def quantize_linear(x, scale, zero_point):
    info = np.iinfo(zero_point.dtype)
    q = np.rint(x.astype(np.float32) / np.float32(scale)) + zero_point.astype(np.float64)
    return np.clip(q, info.min, info.max).astype(zero_point.dtype)


QUANT_ORACLES: dict[str, Callable[..., np.ndarray]] = {
    "QuantizedConv": quantized_conv,
    "QuantizedFullyConnected": quantized_fully_connected,
    "QuantizedAdd": quantized_add,
    "DequantizeLinear": dequantize_linear,
    "QuantizeLinear": quantize_linear,
}
