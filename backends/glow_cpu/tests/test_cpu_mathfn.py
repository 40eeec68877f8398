"""The float32 math of ``kernels/mathfn.py`` (erf, exp, tanh, GELU) against float64."""

from __future__ import annotations

import math
import os
import subprocess
import sys

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


def test_math_and_fused_gelu_compile_for_avx512(tmp_path):
    """LLVM's vectorizer aborts the process on some loops for AVX-512 CPUs (see
    test_cpu_pool_window.py), so the kernels these functions are in (Gelu in both forms,
    alone and as a MatMul epilogue; Erf; Exp) are bundled for one in a child process."""
    from onnx import TensorProto, helper, save

    nodes = [
        helper.make_node("Gelu", ["x"], ["g"]),
        helper.make_node("Gelu", ["g"], ["t"], approximate="tanh"),
        helper.make_node("Erf", ["t"], ["e"]),
        helper.make_node("Exp", ["e"], ["y"]),
    ]
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 37]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "math", value[:1], value[1:])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), tmp_path / "math.onnx")
    env = {**os.environ, "GLOW_CPU_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-c", "import sys; from glow_core.cli import main; sys.exit(main())"]
    for model in (str(tmp_path / "math.onnx"), "zoo:transformer_encoder"):
        args = [
            "bundle",
            model,
            "-o",
            str(tmp_path / "out"),
            "--target",
            "x86_64-linux-gnu",
            "--cpu",
            "emeraldrapids",
        ]
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, check=False, timeout=600
        )
        assert done.returncode == 0, f"{model}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert sorted(p.name for p in (tmp_path / "out").glob("*.o")) == ["math.o", "transformer_encoder.o"]
