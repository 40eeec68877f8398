"""Whole zoo models through the full pipeline on OpenCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo import LARGE_MODELS, MODELS, random_inputs

TOLERANCE = 1e-4
LARGE = ("resnet50", "mobilenetv2")  # whole ImageNet networks, checked as slow tests
SMALL = [name for name in MODELS if name not in LARGE and name not in LARGE_MODELS]


def _check(name: str, batch: int, rng: np.random.Generator, **options) -> float:
    model = MODELS[name](batch=batch, seed=int(rng.integers(1 << 30)))
    compiled = glow_core.compile(model, backend="opencl", options=options)
    inputs = random_inputs(model, seed=int(rng.integers(1 << 30)))
    expected = onnxruntime_outputs(model, inputs)
    first = compiled.run(inputs)
    again = compiled.run(inputs)  # a second run starts from the first one's leftovers
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    return max_relative_error(first, expected)


@pytest.mark.parametrize("name", SMALL)
def test_model_matches_onnxruntime(name, backend, registry, rng):
    assert _check(name, 1, rng) < TOLERANCE


@pytest.mark.parametrize("name", ["small_cnn", "transformer_encoder"])
def test_batched_model_with_gpu_shaped_kernels(name, backend, registry, rng):
    """Batch 3 through the local-memory tiled GEMMs (the kernels a GPU would get)."""
    assert _check(name, 3, rng, gemm="tiled") < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE)
def test_imagenet_model_matches_onnxruntime(name, backend, registry, rng):
    """ResNet-50 and MobileNetV2 at batch 1 (the BERT-like encoder is among SMALL)."""
    assert _check(name, 1, rng) < TOLERANCE
