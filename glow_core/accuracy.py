"""Agreement with an independent oracle: one definition of relative error for every layer.

The relative error of ``actual`` against ``expected`` is ``max|actual - expected| / max|expected|``
(the infinity norm of the difference over that of the reference): element-wise ratios blow up
wherever the reference is near zero, which says nothing about the implementation.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from glow_core.errors import GlowError, OracleError
from glow_core.types import ElemKind

PRIMITIVE_TOLERANCE: dict[ElemKind, float] = {
    ElemKind.float32: 1e-5,
    ElemKind.float16: 2e-3,  # about 4 half-precision ulps of the largest element
    ElemKind.bfloat16: 2e-2,  # about 2.5 bfloat16 ulps
    ElemKind.float64: 1e-12,  # the reference itself computes in float64
}
"""Largest relative error (``relative_error``) one primitive's float result may have against
the reference; integer and boolean results must be exact. The conformance suite judges by it
and a backend may read it (glow-cpu's Winograd rule keeps each layer inside it), so it lives
here, below both."""


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """``max|actual - expected| / max|expected|``; inf when shapes differ or NaNs appear."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape or not np.all(np.isfinite(actual)):
        return float("inf")
    scale = float(np.max(np.abs(expected), initial=0.0))
    diff = float(np.max(np.abs(actual - expected), initial=0.0))
    if scale == 0.0:
        return diff
    return diff / scale


def max_relative_error(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    """The worst relative error over all outputs (inf if an output is missing)."""
    if set(actual) != set(expected):
        return float("inf")
    return max((relative_error(actual[k], expected[k]) for k in expected), default=0.0)


APPROXIMATE_COSINE = 0.99
"""Cosine similarity a quantized or reduced-precision run's outputs keep with the float
model's (per image; docs/quantization.md "Accuracy"): int8 and bf16 results differ from
float32 by far more than ``PRIMITIVE_TOLERANCE``, so agreement is judged by direction."""


def cosine_similarity(actual: np.ndarray, expected: np.ndarray) -> float:
    """The smallest cosine similarity between ``actual`` and ``expected`` over the rows of
    their first dimension (the images of a batch; a scalar or 1-D output is one row);
    -1 when shapes differ or values are not finite, 1 for two zero rows."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape or not np.all(np.isfinite(actual)):
        return -1.0
    rows = 1 if actual.ndim < 2 else actual.shape[0]
    a, e = actual.reshape(rows, -1), expected.reshape(rows, -1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(e, axis=1)
    dots = np.sum(a * e, axis=1)
    cosines = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), np.where(dots == 0, 1.0, -1.0))
    return float(np.min(cosines, initial=1.0))


def min_cosine_similarity(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    """The worst ``cosine_similarity`` over all outputs (-1 if an output is missing)."""
    if set(actual) != set(expected):
        return -1.0
    return min((cosine_similarity(actual[k], expected[k]) for k in expected), default=1.0)


def onnxruntime_outputs(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of ``model`` run by onnxruntime on one thread (the independent oracle)."""
    try:
        import onnxruntime
    except ImportError:
        raise GlowError(
            "onnxruntime is not installed: `pip install onnxruntime` to compare with it"
        ) from None
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(inputs)), strict=True))
    except Exception as err:  # onnxruntime's own exception types, from its C++ core
        given = ", ".join(f"{n}: {np.asarray(v).dtype}{list(np.shape(v))}" for n, v in inputs.items())
        first = " ".join(str(err).split())[:400] or type(err).__name__
        raise OracleError(
            f"onnxruntime, the reference to compare with, refuses the model or the inputs ({given}): "
            f"{first}. It runs the shapes the model declares: compare at those (a shape glow was "
            "given beyond them has no reference)"
        ) from None
