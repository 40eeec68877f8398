"""Unpadded float32 pooling read in place (kernels/pool.py ``_pool_in_place``), checked against
a float64 numpy oracle: the windows whose 16 outputs span more than two vectors
(Inception-v3's 3x3 stride-2 MaxPools) load per window column, the others per window row.
Widths cover whole and partial 16-output chunks; every output starts poisoned (NaN), so a
lane never written fails the check."""

from __future__ import annotations

from pathlib import Path

import cpu_cases
import numpy as np
import pytest
from glow_conformance.compare import TOLERANCE

import glow_core
from glow_core.accuracy import relative_error
from glow_core.types import ElemKind

# (N, C, H, W), kernel, strides: per-column loads (15 * sw + kw > 32) and per-row loads.
CASES = [
    ((1, 5, 29, 37), (3, 3), (2, 2)),  # Inception's MaxPool shape, odd sizes, a partial chunk
    ((2, 3, 15, 67), (3, 3), (2, 2)),  # two whole chunks and a partial one per row
    ((1, 4, 9, 50), (2, 5), (1, 2)),  # wide window, stride 2 across only
    ((1, 3, 8, 40), (3, 19), (2, 1)),  # stride 1, a window wider than 17 columns
    ((1, 6, 10, 33), (2, 2), (2, 2)),  # fits two vectors: the per-row path
]


def pool_model(op: str, shape, kernel, strides):
    return cpu_cases.pool_model(op, shape, kernel_shape=list(kernel), strides=list(strides))


def oracle(op: str, x: np.ndarray, kernel, strides) -> np.ndarray:
    """The unpadded pooling in float64, window by window."""
    (kh, kw), (sh, sw) = kernel, strides
    n, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    x = x.astype(np.float64)
    out = np.empty((n, c, oh, ow))
    for y in range(oh):
        for z in range(ow):
            window = x[:, :, y * sh : y * sh + kh, z * sw : z * sw + kw]
            out[:, :, y, z] = window.max(axis=(2, 3)) if op == "MaxPool" else window.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("shape,kernel,strides", CASES)
def test_unpadded_pool_matches_float64_oracle(
    rng, op, shape, kernel, strides, threads, monkeypatch, tmp_path
):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    x = rng.standard_normal(shape).astype(np.float32)
    compiled = glow_core.compile(
        pool_model(op, shape, kernel, strides),
        backend="cpu",
        options={"threads": threads, "parallel_work": 0},
    )
    expected = oracle(op, x, kernel, strides)
    for _ in range(2):  # a second run starts from poisoned outputs too
        got = compiled.run({"x": x})["y"]
        assert got.shape == expected.shape
        assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
        assert relative_error(got, expected) < TOLERANCE[ElemKind.float32]


@pytest.mark.parametrize("cpu", ["emeraldrapids", "znver3"])
def test_in_place_pools_compile_for_avx512_and_avx2_cpus(cpu: str, tmp_path: Path) -> None:
    """The per-column loads compile for an AVX-512 and an AVX2 CPU, in a child process (LLVM
    aborted the process on some pooling loops for AVX-512 targets: test_cpu_pool_window.py)."""
    from bundle_helpers import onnx_models_compile_for_cpu_in_a_child

    models = [pool_model("MaxPool", shape, kernel, strides) for shape, kernel, strides in CASES[:3]]
    onnx_models_compile_for_cpu_in_a_child(models, tmp_path, cpu)
