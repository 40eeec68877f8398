"""LayerNorm as one float32 kernel (``kernels/layernorm.py``) against float64."""

from __future__ import annotations

import numpy as np
import pytest
from glow_cpu.backend import CpuBackend

import glow_core
from glow_core.graph import Module
from glow_core.runtime.pipeline import compile_stages


def _layer_norm(shape, norm_shape, axis, epsilon=1e-5) -> Module:
    m = Module()
    b = m.create_function().builder()
    x, scale, bias = (
        b.placeholder(n, s) for n, s in (("x", shape), ("scale", norm_shape), ("bias", norm_shape))
    )
    b.save(b.LayerNorm(x, scale, bias, axis=axis, epsilon=epsilon), "y")
    return m


def _reference(x, scale, bias, axis, epsilon):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x = x.astype(np.float64)
    centered = x - x.mean(axis=axes, keepdims=True)
    return centered / np.sqrt((centered**2).mean(axis=axes, keepdims=True) + epsilon) * scale + bias


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("shape", "norm_shape", "axis"),
    [
        ((2, 128, 256), (256,), -1),  # BERT's: whole vectors, scale and bias per column
        ((3, 5, 37), (37,), 2),  # a masked last vector
        ((4, 3, 5, 7), (5, 7), -2),  # two normalized dimensions
        ((2, 4, 8), (8,), 1),  # scale and bias repeat along the row (4 x 8 per row)
        ((6, 5), (), 0),  # the whole tensor one row, scalar scale and bias
    ],
)
def test_layer_norm_matches_float64(shape, norm_shape, axis, threads, rng):
    x = (rng.standard_normal(shape) * 3 + 1.5).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, norm_shape).astype(np.float32)
    bias = rng.standard_normal(norm_shape).astype(np.float32)
    model = _layer_norm(shape, norm_shape, axis)
    compiled = glow_core.compile(model, backend="cpu", options={"threads": threads, "parallel_work": 0})
    got = compiled.run({"x": x, "scale": scale, "bias": bias})["y"]
    expected = _reference(x, scale, bias, axis, 1e-5)
    assert np.max(np.abs(got - expected)) / np.max(np.abs(expected)) < 1e-6


def test_a_float32_layer_norm_is_one_instruction():
    ir = compile_stages(_layer_norm((2, 16, 32), (32,), -1), CpuBackend()).ir
    kinds = [i.kind for i in ir.instrs if i.kind not in ("alloc", "dealloc", "view")]
    assert "LayerNorm" in kinds and not {"ReduceSum", "Broadcast", "Sqrt"} & set(kinds), kinds
