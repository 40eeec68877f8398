"""The digits CNN's first-step gradients against PyTorch's, from the same weights and batch
(skipped where torch is not installed: it is an optional extra, ``pip install torch``)."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core import SGD, Trainer

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from bench.train_vs_torch import torch_gradients  # noqa: E402
from examples.train_digits import lenet  # noqa: E402


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_first_step_gradients_match_pytorch(backend, install_registry, rng) -> None:
    from tests.installed_backends import install_backend

    install_backend(install_registry, backend)
    batch = 16
    model = lenet(batch, rng)
    initial = {c.name: np.array(c.value) for c in model.constants.values()}
    images = rng.random((batch, 1, 8, 8)).astype(np.float32)
    classes = rng.integers(0, 10, batch)
    # SGD with rate 1 and no momentum: the first update is exactly the gradient.
    trainer = Trainer(model, optimizer=SGD(1.0), backend=backend)
    trainer.step((images, classes))
    expected = torch_gradients(initial, images, classes)
    assert sorted(expected) == sorted(trainer.params)
    for name, weight in trainer.weights().items():
        grad = initial[name] - weight
        error = np.abs(grad - expected[name]).max() / np.abs(expected[name]).max()
        assert error < 1e-4, (name, error)
