"""Whole zoo models compiled for cpu against onnxruntime, and threads 1 vs 2."""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo import MODELS, random_inputs

pytest.importorskip("onnxruntime")

FAST = ["mlp", "small_cnn", "resnet_bottleneck", "mobilenetv2_block", "transformer_encoder", "bert_mini"]


def _check(name: str, threads: int) -> dict[str, np.ndarray]:
    model = MODELS[name]()
    inputs = random_inputs(model, seed=0)
    options = {"threads": threads, "parallel_work": 0}  # share every kernel, small or not
    compiled = glow_core.compile(model, backend="cpu", options=options)
    got = compiled.run(inputs)
    error = max_relative_error(got, onnxruntime_outputs(model, inputs))
    assert error < 1e-4, f"{name}: relative error {error:.3g} against onnxruntime"
    return got


@pytest.mark.parametrize("name", FAST)
def test_model_matches_onnxruntime(name, registry):
    _check(name, threads=1)


@pytest.mark.parametrize("name", ["small_cnn", "transformer_encoder"])
def test_threads_give_the_same_results(name, registry):
    one, two = _check(name, threads=1), _check(name, threads=2)
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_resnet50(registry):
    _check("resnet50", threads=2)


@pytest.mark.slow
def test_inception_v3(registry):
    """Parallel branches, asymmetric 1x7/7x1 and 1x3/3x1 convolutions, pad-counting average pools."""
    _check("inception_v3", threads=1)


def test_cpu_is_the_default_backend(registry):
    assert glow_core.plugins.get_backend().info().name == "cpu"
