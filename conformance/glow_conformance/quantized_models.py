"""Quantized test models the backends' int8 tests share: one integer layer with full-range
operands, and an onnxruntime-quantized (QDQ) copy of a float model.

A backend with int8 kernels proves them bit-equal to the interpreter's integer reference on
these; keeping the builders here gives every backend the same operands (and the same
random draws, so a seed means the same case everywhere).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from glow_core import Builder, Module
from glow_core.types import ElemKind

if TYPE_CHECKING:
    import onnx

SOURCE_KINDS = {"i8": (ElemKind.int8, np.int8), "u8": (ElemKind.uint8, np.uint8)}
"""The input kinds a layer case names: int8 or uint8 activations."""


def integer_layer(
    rng: np.random.Generator,
    kind: str,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    source: str = "i8",
    *,
    weight_low: int = -128,
    weight_high: int = 128,
    bias_bound: int = 5000,
    spread: float = 40.0,
    per_tensor: bool = False,
    multipliers: Callable[[int, int], np.ndarray] | None = None,
    **attrs: object,
) -> tuple[Module, dict[str, np.ndarray]]:
    """One ``kind`` layer (QuantizedConv or QuantizedFullyConnected) on a placeholder ``x`` of
    kind ``source``, saved as ``out``, with full-range random operands, and its input.

    Weights are drawn from ``[weight_low, weight_high)`` (-127 keeps them symmetric, as the
    quantize pass makes them) and biases from ``[-bias_bound, bias_bound)``; ``spread`` sets
    how far the results reach: 40 spreads them over the int8 range, far more saturates most;
    ``per_tensor`` gives every channel one multiplier; ``multipliers(channels, depth)``, when
    given, makes them instead (no random draw). The random draws are, in order: weights,
    bias, multipliers, input."""
    elem, dtype = SOURCE_KINDS[source]
    m = Module()
    b = Builder(m.create_function())
    x = b.placeholder("x", x_shape, elem=elem)
    channels = w_shape[0] if kind == "QuantizedConv" else w_shape[1]
    depth = int(np.prod(w_shape[1:])) if kind == "QuantizedConv" else w_shape[0]
    w = m.create_constant("w", rng.integers(weight_low, weight_high, w_shape).astype(np.int8))
    bias = m.create_constant("bias", rng.integers(-bias_bound, bias_bound, channels).astype(np.int32))
    if multipliers is not None:
        scale = multipliers(channels, depth)
    else:  # products of two full-range int8 values have std ~75*75
        scale = rng.uniform(0.5, 2.0, 1 if per_tensor else channels) * spread / (np.sqrt(depth) * 75 * 75)
    multiplier = m.create_constant("mult", np.broadcast_to(scale, (channels,)).copy())
    b.save(b.create(kind, x, w, bias, multiplier, **attrs), "out")
    info = np.iinfo(dtype)
    return m, {"x": rng.integers(info.min, int(info.max) + 1, x_shape).astype(dtype)}


def onnxruntime_qdq(model: onnx.ModelProto, workdir: Path, calibration: int = 3) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime's recommended flow: BatchNorm folded into the
    convolutions (here, so every onnxruntime version quantizes the same graph:
    ``onnx_batchnorm``), pre-process, then static QDQ quantization, int8 activations and
    per-channel int8 weights, calibrated on ``calibration`` seeded random batches. The
    steps' files are written to ``workdir``."""
    import onnx
    from onnxruntime import quantization
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from glow_conformance.onnx_batchnorm import fold_conv_batchnorm
    from glow_core.model_zoo import random_inputs

    class SeededReader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([random_inputs(model, 1000 + seed) for seed in range(calibration)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    src, pre, dst = (os.fspath(Path(workdir) / f"{n}.onnx") for n in ("float", "pre", "qdq"))
    onnx.save(fold_conv_batchnorm(model), src)
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    quantization.quantize_static(
        pre,
        dst,
        SeededReader(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
    )
    return onnx.load(dst)


def output_step(qdq: onnx.ModelProto) -> float:
    """The quantization scale of a QDQ model's first output, which leaves through a
    DequantizeLinear with a per-tensor scale: the smallest difference two correct
    implementations can show there once one value inside lands on the other side of a
    rounding edge."""
    import onnx

    inits = {t.name: t for t in qdq.graph.initializer}
    (producer,) = [n for n in qdq.graph.node if qdq.graph.output[0].name in n.output]
    if producer.op_type != "DequantizeLinear":
        raise ValueError(
            f"the output {qdq.graph.output[0].name!r} comes from {producer.op_type}, not DequantizeLinear"
        )
    return float(onnx.numpy_helper.to_array(inits[producer.input[1]]))
