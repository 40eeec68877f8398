"""Comparing what a target computed with what an oracle says, and saying where they differ.

Primitives are compared with ``glow_core.accuracy.relative_error`` (one definition of error
for all of glow) under a tolerance per element kind; ONNX node tests with the tolerances
their own cases carry, the way onnx's runner compares them. A mismatch message names the
worst element, so a vendor sees *where* a kernel goes wrong, not only that it does.
(Laying whole scoreboards of several backends side by side is ``side_by_side.py``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from glow_conformance.results import PASS, Outcome, Verdict
from glow_core.accuracy import PRIMITIVE_TOLERANCE as TOLERANCE
from glow_core.accuracy import relative_error
from glow_core.types import Type


def _fail(message: str) -> Verdict:
    return Verdict(Outcome.FAILED, message)


def _where(index: tuple[int, ...]) -> str:
    return f"[{','.join(map(str, index))}]" if index else "[]"


def _show(value: Any) -> str:
    """An element as a plain number (``-48``, not ``np.int8(-48)``)."""
    return repr(np.asarray(value).item())


def check_result(actual: Any, expected: np.ndarray, result: Type, zero_sign: bool = True) -> Verdict:
    """A primitive's output against its float64 reference, for a result of type ``result``;
    ``zero_sign``: whether the sign of a zero element is part of the spec."""
    if not isinstance(actual, np.ndarray):
        return _fail(f"returned {type(actual).__name__}, not a numpy array")
    if actual.dtype != result.dtype or actual.shape != result.shape:
        return _fail(f"returned {actual.dtype}{list(actual.shape)}, the type rule says {result}")
    expected = np.asarray(expected)
    if expected.shape != result.shape:
        return Verdict(
            Outcome.ERROR, f"the reference returned shape {expected.shape}, the type says {result}"
        )
    if result.elem.is_float:
        return _check_float(actual, expected, result, zero_sign)
    exact = expected.astype(result.dtype)
    wrong = np.argwhere(actual != exact)
    if not len(wrong):
        return PASS
    first = tuple(int(i) for i in wrong[0])
    return _fail(
        f"{len(wrong)} of {actual.size} elements differ; first at {_where(first)}: "
        f"got {_show(actual[first])}, expected {_show(exact[first])}"
    )


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _special_problem(got: np.ndarray, want: np.ndarray, zero_sign: bool) -> str | None:
    """Where NaN, an infinity or the sign of a zero differs from the reference rounded to the
    result kind (``want``: a float64 sum of two float32 maxima is inf there), or None."""
    unwritten = ~np.isfinite(got) & np.isfinite(want)
    if unwritten.any():
        at = _first(unwritten)
        return (
            f"{int(unwritten.sum())} of {got.size} elements are not finite (unwritten output?); "
            f"first at {_where(at)}: got {float(got[at])!r}, expected {float(want[at])!r}"
        )
    special = ~np.isfinite(want) & ~((np.isnan(got) & np.isnan(want)) | (got == want))
    if special.any():
        at = _first(special)
        return (
            f"{int(special.sum())} of {got.size} elements differ from the reference's NaN or "
            f"infinity; first at {_where(at)}: got {float(got[at])!r}, expected {float(want[at])!r}"
        )
    if zero_sign:
        lost = (want == 0) & (got == 0) & (np.signbit(want) != np.signbit(got))
        if lost.any():
            at = _first(lost)
            return (
                f"{int(lost.sum())} of {got.size} zeros have the wrong sign; first at {_where(at)}: "
                f"got {float(got[at])!r}, expected {float(want[at])!r}"
            )
    return None


def _check_float(actual: np.ndarray, expected: np.ndarray, result: Type, zero_sign: bool) -> Verdict:
    tolerance = TOLERANCE[result.elem]
    wide = actual.astype(np.float64)
    with np.errstate(all="ignore"):
        want = expected.astype(result.dtype).astype(np.float64)
        expected = expected.astype(np.float64)
    problem = _special_problem(wide, want, zero_sign)
    if problem:
        return _fail(problem)
    # Finite elements are compared with the reference rounded to the result kind too: a
    # product of two denormals is 1e-76 in float64 and exactly 0 in float32.
    finite = np.isfinite(want)
    error = relative_error(wide[finite], want[finite])
    if error <= tolerance:
        return PASS
    diff = np.where(finite, np.abs(wide - np.where(finite, want, 0.0)), -1.0)
    flat = int(np.argmax(diff))
    worst = tuple(int(i) for i in np.unravel_index(flat, actual.shape)) if actual.ndim else ()
    return _fail(
        f"relative error {error:.3g} > {tolerance:g}; worst at {_where(worst)}: "
        f"got {wide[worst]:.6g}, expected {want[worst]:.6g}"
    )


# ---- ONNX node tests ---------------------------------------------------------------------


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name.startswith(("bfloat", "float"))


def check_onnx_outputs(actual: Sequence[Any], expected: Sequence[Any], rtol: float, atol: float) -> Verdict:
    """All outputs of a node test, in graph-output order: same count, kinds, shapes, values."""
    if len(actual) != len(expected):
        return _fail(f"returned {len(actual)} outputs, the test expects {len(expected)}")
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        problem = _onnx_value_problem(got, want, rtol, atol)
        if problem:
            return _fail(f"output {index}: {problem}")
    return PASS


def _onnx_value_problem(got: Any, want: Any, rtol: float, atol: float) -> str | None:
    """Why one output (a tensor, a sequence of them, or an absent optional) differs, or None."""
    if want is None or got is None:
        return None if got is None and want is None else f"got {got!r}, expected {want!r}"
    if isinstance(want, list | tuple):
        if not isinstance(got, list | tuple) or len(got) != len(want):
            return f"got {type(got).__name__}, expected a sequence of {len(want)}"
        problems = (_onnx_value_problem(g, w, rtol, atol) for g, w in zip(got, want, strict=True))
        return next((f"item {i}: {p}" for i, p in enumerate(problems) if p), None)
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype == object:
        return None if np.array_equal(got, want) else "strings differ"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if _is_float(want.dtype):
        return _float_problem(got, want, rtol, atol)
    wrong = int(np.count_nonzero(got != want))
    return f"{wrong} of {want.size} elements differ" if wrong else None


STORED_NOISE_ULPS = 4
"""Units in the last place, of the expected output's largest magnitude, that an element may
differ by however small it is (see ``noise_floor``)."""


def noise_floor(want: np.ndarray, eps: float) -> float:
    """The absolute error a stored output's own rounding explains: ``STORED_NOISE_ULPS`` ulps
    of its largest finite magnitude.

    The node tests' expected outputs were computed in the output's precision, so an element
    whose exact value is 0 holds rounding noise of the size of the tensor's largest values,
    not of its own (``test_dft_inverse`` stores 1.9e-6 where the exact result is 0, in an
    output whose largest element is 54: 0.3 ulps of 54, and 19 times onnx's atol of 1e-7).
    Taking the larger of the test's atol and this floor accepts that noise and nothing more:
    against the default rtol of 1e-3 it is 2,000 times smaller for float32. Only float32 and
    float64 outputs get it: in half and narrower kinds four ulps are percents of the scale.
    """
    if want.dtype not in (np.float32, np.float64):
        return 0.0
    finite = np.abs(want[np.isfinite(want)])
    return STORED_NOISE_ULPS * eps * float(finite.max()) if finite.size else 0.0


def _float_problem(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    atol = max(atol, noise_floor(want, float(ml_dtypes.finfo(want.dtype).eps)))
    if want.dtype.kind != "f":
        # numpy cannot mix ml_dtypes floats with Python floats; compare them as float32, with at
        # least two ulps of the narrow kind as onnx's runner does for bfloat16.
        rtol = max(rtol, 2 * float(ml_dtypes.finfo(want.dtype).eps))
        got, want = got.astype(np.float32), want.astype(np.float32)
    close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    bad = np.argwhere(~close)
    first = tuple(int(i) for i in bad[0])
    return (
        f"{len(bad)} of {want.size} elements differ beyond rtol={rtol:g}, atol={atol:g}; "
        f"first at {_where(first)}: got {_show(got[first])}, expected {_show(want[first])}"
    )
