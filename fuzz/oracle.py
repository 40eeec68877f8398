"""The independent oracles (onnxruntime and ``onnx.reference``), inputs for a model, and agreement.

A mutant's right answer is known only where two independent implementations accept it and
agree; only then can glow's answer be called wrong. Agreement is glow's own definition of
relative error (``glow_core.accuracy.relative_error``) on the finite elements, plus identical
shapes, dtypes and positions of NaN and infinities (a mutated epsilon of NaN must give NaN
everywhere, in every implementation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from glow_core.accuracy import relative_error

MAX_FEED_ELEMENTS = 1 << 22
"""Inputs larger than this in total are not made: the case is loaded and compiled, not run."""

# Relative error allowed per output element kind; integers and booleans must match exactly.
TOLERANCE = {"f": 1e-3, "e": 2e-2}


def make_feeds(model: onnx.ModelProto, seed: int) -> tuple[dict[str, np.ndarray] | None, str]:
    """Seeded random inputs for every graph input that is not an initializer, or None and why.

    Unknown and symbolic dims become 1 (a Session specializes for them); floats are standard
    normal, integers small and non-negative so that index-like inputs are often in range.
    """
    gen = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    total = 0
    for info in model.graph.input:
        if info.name in initializers:
            continue
        if not info.type.HasField("tensor_type"):
            return None, f"input {info.name!r} is not a tensor"
        tensor = info.type.tensor_type
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        except (KeyError, ValueError, TypeError):
            return None, f"input {info.name!r} has element type {tensor.elem_type}, which numpy lacks"
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        if any(d < 0 for d in dims):
            return None, f"input {info.name!r} has a negative dim {dims}"
        size = int(np.prod(dims, dtype=object))
        total += size
        if total > MAX_FEED_ELEMENTS:
            return None, f"inputs exceed {MAX_FEED_ELEMENTS} elements"
        feeds[info.name] = _random(gen, np.dtype(dtype), tuple(dims))
    return feeds, ""


def _random(gen: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == np.bool_:
        return gen.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return gen.integers(0, 3, shape).astype(dtype)
    if dtype.kind in "fc" or dtype.name == "bfloat16":
        return gen.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)


def onnxruntime_outputs(model_bytes: bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Outputs of onnxruntime (one thread, quiet logging) by graph output name."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    session = onnxruntime.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def reference_outputs(model_bytes: bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Outputs of ``onnx.reference`` (pure Python and numpy) by graph output name."""
    from onnx.reference import ReferenceEvaluator

    model = onnx.load_from_string(model_bytes)
    evaluator = ReferenceEvaluator(model)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, evaluator.run(names, dict(feeds)), strict=True))


def disagreement(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> str | None:
    """Why ``actual`` does not match ``expected`` (names, dtypes, shapes, values), or None."""
    if set(actual) != set(expected):
        return f"outputs {sorted(actual)} vs {sorted(expected)}"
    for name, want in expected.items():
        why = _differ(actual[name], want)
        if why is not None:
            return f"output {name!r}: {why}"
    return None


def _differ(got: Any, want: Any) -> str | None:
    if isinstance(want, list) or isinstance(got, list):
        if not (isinstance(want, list) and isinstance(got, list)) or len(got) != len(want):
            return f"sequence {_describe(got)} vs {_describe(want)}"
        return next((w for w in map(_differ, got, want) if w is not None), None)
    if want is None or got is None:
        return None if want is None and got is None else f"{_describe(got)} vs {_describe(want)}"
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{_describe(got)} vs {_describe(want)}"
    if want.dtype.kind not in "fc" and want.dtype.name != "bfloat16":
        return None if np.array_equal(got, want) else "values differ"
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want64)
    same_special = np.array_equal(np.isnan(got64), np.isnan(want64)) and np.array_equal(
        np.where(np.isinf(want64), want64, 0), np.where(np.isinf(got64), got64, 0)
    )
    if not same_special:
        return "NaN or infinity at different positions"
    error = relative_error(got64[finite], want64[finite])
    tol = TOLERANCE.get(want.dtype.kind if want.itemsize > 2 else "e", 1e-3)
    return None if error <= tol else f"relative error {error:.3g} > {tol:g}"


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list):
        return f"a sequence of {len(value)}"
    array = np.asarray(value)
    return f"{array.dtype}{list(array.shape)}"
