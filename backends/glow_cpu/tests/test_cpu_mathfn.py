"""The float32 math of ``kernels/mathfn.py`` (erf, exp, tanh, GELU) against float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

import glow_core
from glow_core.graph import Module


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_float64(approximate, registry):
    """The kept Gelu, exact or tanh form, against its formula in float64 over [-10, 10]."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (4001,))
    b.save(b.Gelu(x, approximate=approximate), "y")
    grid = np.linspace(-10, 10, 4001).astype(np.float32)
    got = glow_core.compile(m, backend="cpu", options={"threads": 1}).run({"x": grid})["y"]
    v = grid.astype(np.float64)
    if approximate == "none":
        exact = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    else:
        exact = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    # 1 + erf (or tanh) cancels for x < -3, as in the primitives it replaces: an absolute
    # error of a few float32 ulps of 1, scaled by x, on values that are then near 0.
    assert np.all(np.abs(got - exact) <= 2e-6 * np.abs(exact) + 1e-7 * np.abs(v))


RANGES = {"Erf": (-6, 6, math.erf), "Exp": (-87, 88.7, math.exp), "Tanh": (-12, 12, math.tanh)}


@pytest.mark.parametrize("kind", sorted(RANGES))
def test_float32_math_functions_match_float64(kind, registry):
    """erf, exp and tanh (``kernels/mathfn.py``) within 1e-6 of float64 over their whole
    range, specials included: NaN stays NaN, infinities and signed zeros are kept."""
    lo, hi, exact = RANGES[kind]
    grid = np.linspace(lo, hi, 200_003).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0], np.float32)
    x = np.concatenate([grid, specials])
    m = Module()
    b = m.create_function().builder()
    b.save(b.create(kind, b.placeholder("x", x.shape)), "y")
    got = glow_core.compile(m, backend="cpu", options={"threads": 1}).run({"x": x})["y"].astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.array([exact(float(v)) if np.isfinite(v) else np.float64(np.asarray(v)) for v in x])
    if kind != "Exp":  # erf and tanh of +-inf are +-1
        want[np.isinf(x)] = np.sign(x[np.isinf(x)])
    else:
        want[np.isinf(x)] = np.where(x[np.isinf(x)] > 0, np.inf, 0.0)
    finite = np.isfinite(want) & (want != 0)
    assert np.max(np.abs(got[finite] - want[finite]) / np.abs(want[finite])) < 1e-6
    np.testing.assert_array_equal(got[~finite], want[~finite])
    assert np.array_equal(np.signbit(got), np.signbit(want)) or kind == "Exp"
