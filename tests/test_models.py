"""Whole models through the full pipeline on the interpreter, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo import LARGE_MODELS, MODELS, random_inputs

TOLERANCE = 1e-4
# gru_text unrolls to ~28k nodes: the interpreter with verify_each takes minutes on it.
SLOW = ["gru_text"]
SMALL = [name for name in MODELS if name not in LARGE_MODELS and name not in SLOW]


def _check(name: str, batch: int, rng: np.random.Generator) -> float:
    model = MODELS[name](batch=batch, seed=int(rng.integers(1 << 30)))
    compiled = glow_core.compile(model, backend="interpreter", verify_each=True)
    inputs = random_inputs(model, seed=int(rng.integers(1 << 30)))
    return max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs))


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", SMALL)
def test_model_matches_onnxruntime(name, batch, registry, rng):
    assert _check(name, batch, rng) < TOLERANCE


@pytest.mark.slow
def test_resnet50_matches_onnxruntime(registry, rng):
    assert _check("resnet50", 1, rng) < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_slow_model_matches_onnxruntime(name, registry, rng):
    assert _check(name, 1, rng) < TOLERANCE
