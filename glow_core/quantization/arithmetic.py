"""The integer arithmetic of quantized layers, as graph fragments of existing primitives.

An int8/uint8 tensor travels between quantized layers as itself. Products and sums are
taken on operands centered on their offsets (``q - offset``) in float64, where every int8
product and every sum of up to 2**37 of them is exact: the result *is* the int32
accumulation (as the ONNX ConvInteger importer computes it), run on every backend's
float64 Convolution/MatMul until int8 kernels exist. A requantization then multiplies the
accumulator by the real multiplier ``s_in * s_w / s_out`` in float64, rounds half to even,
adds the output offset and saturates. tests/test_quant_arithmetic.py emulates exactly these
steps in numpy; a change here must change that emulation too.
"""

from __future__ import annotations

import numpy as np

from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.linear_quant import round_half_even
from glow_core.quantization.schema import QuantParams
from glow_core.types import ElemKind

WIDE = ElemKind.float64
"""The kind integer accumulations are carried in (exact for int8 products)."""


def constant(b: Builder, value: np.ndarray, label: str) -> Node:
    """A Constant holding ``value`` with its dtype kept."""
    return b.constant(value, label, dtype=value.dtype)


def quantize(b: Builder, x: Node, p: QuantParams, name: str) -> Node:
    """clip(round_half_even(x / scale) + offset) in ``p.elem``: a float value enters a
    quantized region."""
    wide = b.Convert(x, elem=WIDE.name) if x.type.elem is not WIDE else x
    scaled = b.Div(wide, b.splat(p.scale, wide))
    return saturate(b, round_half_even(b, scaled), p, name)


def saturate(b: Builder, rounded: Node, p: QuantParams, name: str) -> Node:
    """``rounded + offset`` clamped to ``p.elem``'s range and stored in it."""
    shifted = b.Add(rounded, b.splat(float(p.offset), rounded)) if p.offset else rounded
    clipped = b.Clip(shifted, low=float(p.qmin), high=float(p.qmax))
    return b.Convert(clipped, elem=p.elem.name, name=name)


def dequantize(b: Builder, q: Node, p: QuantParams, elem: ElemKind, name: str) -> Node:
    """``(q - offset) * scale`` in float ``elem``: a quantized value leaves its region."""
    x = b.Convert(q, elem=elem.name)
    if p.offset:
        x = b.Sub(x, b.splat(float(p.offset), x))
    return b.Mul(x, b.splat(p.scale, x), name=name)


def centered(b: Builder, q: Node, p: QuantParams) -> Node:
    """``q - offset`` in float64 (exact): the operand of an integer product or sum."""
    x = b.Convert(q, elem=WIDE.name)
    return b.Sub(x, b.splat(float(p.offset), x)) if p.offset else x


def requantize(b: Builder, acc: Node, multiplier: float | np.ndarray, p: QuantParams, name: str) -> Node:
    """``acc`` (an exact integer accumulation, float64) times ``multiplier`` (a scalar, or
    an array that broadcasts to ``acc``), rounded half to even, offset and saturated."""
    if np.ndim(multiplier) == 0:
        m = b.splat(float(multiplier), acc)
    else:
        m = b.broadcast_to(
            constant(b, np.asarray(multiplier, np.float64), f"{name}/multiplier"), acc.type.shape
        )
    return saturate(b, round_half_even(b, b.Mul(acc, m)), p, name)


def int32_bias(bias: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """A float bias at the accumulator's scale (``s_in * s_w`` per channel), rounded half to
    even and saturated to int32, then held in float64 to add to the accumulation."""
    info = np.iinfo(np.int32)
    q = np.clip(np.rint(np.asarray(bias, np.float64) / scales), info.min, info.max)
    return q.astype(np.int32).astype(np.float64)
