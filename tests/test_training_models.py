"""An MLP trained on a backend: the first step's update matches a numpy hand computation
of the gradients, and the loss falls over a few steps from seeded weights."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core import SGD, Module, differentiate
from glow_core.training import softmax_cross_entropy
from tests.installed_backends import install_backend

N, D, H, C = 16, 8, 12, 3
LR, MOMENTUM, DECAY = 0.2, 0.9, 1e-3


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w1": (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(H)).astype(np.float32),
        "w2": (rng.standard_normal((H, C)) / np.sqrt(H)).astype(np.float32),
        "b2": (0.1 * rng.standard_normal(C)).astype(np.float32),
    }


def _mlp(weights: dict[str, np.ndarray]) -> Module:
    module = Module("mlp")
    fn = module.create_function()
    b = fn.builder()
    x = b.placeholder("x", (N, D))
    labels = b.placeholder("labels", (N, C))
    w = {name: b.constant(value, name=name) for name, value in weights.items()}
    hidden = b.Relu(b.FullyConnected(x, w["w1"], w["b1"]))
    logits = b.FullyConnected(hidden, w["w2"], w["b2"])
    b.save(softmax_cross_entropy(b, logits, labels), "objective")
    return module


def _numpy_gradients(w: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Back-propagation written out by hand in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    z1 = x @ w["w1"] + w["b1"]
    h = np.maximum(z1, 0)
    z2 = h @ w["w2"] + w["b2"]
    p = np.exp(z2 - z2.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz2 = (p - y) / len(x)
    dh = dz2 @ w["w2"].T
    dz1 = dh * (z1 > 0)
    return {"w1": x.T @ dz1, "b1": dz1.sum(0), "w2": h.T @ dz2, "b2": dz2.sum(0)}


def _batch(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Three separable blobs: the class is the largest of three fixed projections."""
    x = rng.standard_normal((N, D))
    y = np.eye(C)[np.argmax(x @ rng.standard_normal((D, C)), axis=1)]
    return x.astype(np.float32), y.astype(np.float32)


@pytest.mark.parametrize("backend", ["interpreter", "cpu", "opencl"])
def test_mlp_first_step_matches_numpy_and_loss_falls(backend, install_registry, rng) -> None:
    install_backend(install_registry, backend)
    weights = _weights(rng)
    x, y = _batch(rng)
    model = _mlp(weights)
    kinds_before = sorted(n.kind for n in model.function.nodes)
    training = differentiate(model.function, "objective", optimizer=SGD(LR, MOMENTUM, DECAY))
    training.compile(backend)
    assert sorted(training.params) == ["b1", "b2", "w1", "w2"]
    # The model itself is untouched: still inference-only, weights still Constants.
    assert sorted(n.kind for n in model.function.nodes) == kinds_before
    assert set(model.constants) >= {"w1", "b1", "w2", "b2"}

    losses = [training.step({"x": x, "labels": y})]
    grads = _numpy_gradients(weights, x.astype(np.float64), y.astype(np.float64))
    for name, grad in grads.items():
        # First step: the velocity starts at zero, so w1 = w0 - lr * (g + decay * w0).
        expected = weights[name] - LR * (grad + DECAY * weights[name])
        got = training.weights[name]
        assert np.abs(got - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max()), name

    for _ in range(19):
        losses.append(training.step({"x": x, "labels": y}))
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.3 * losses[0], losses


def _small_cnn(rng: np.random.Generator, batch: int) -> Module:
    """Conv(3x3, pad 1) + Relu + MaxPool(2) + AvgPool(2) + FullyConnected over 8x8 images."""
    module = Module("cnn")
    fn = module.create_function()
    b = fn.builder()
    images = b.placeholder("images", (batch, 1, 8, 8))
    labels = b.placeholder("labels", (batch, C))
    filt = b.constant((rng.standard_normal((4, 1, 3, 3)) / 3).astype(np.float32), name="filter")
    bias = b.constant(np.zeros(4, np.float32), name="conv_bias")
    features = b.Relu(b.conv(images, filt, bias, pads=(1, 1, 1, 1)))
    pooled = b.AvgPool(b.MaxPool(features, kernel=(2, 2), strides=(2, 2)), kernel=(2, 2), strides=(2, 2))
    flat = b.reshape(pooled, (batch, -1))
    w = b.constant((rng.standard_normal((16, C)) / 4).astype(np.float32), name="fc_weights")
    fc_bias = b.constant(np.zeros(C, np.float32), name="fc_bias")
    b.save(softmax_cross_entropy(b, b.FullyConnected(flat, w, fc_bias), labels), "objective")
    return module


@pytest.mark.parametrize("backend", ["interpreter", "cpu", "opencl"])
def test_small_cnn_loss_falls(backend, install_registry, rng) -> None:
    """Images whose class is the quadrant holding a bright blob: learnable by the conv."""
    install_backend(install_registry, backend)
    batch = 12
    classes = rng.integers(0, C, batch)
    images = 0.1 * rng.standard_normal((batch, 1, 8, 8))
    for k, cls in enumerate(classes):
        images[k, 0, 4 * (cls % 2) : 4 * (cls % 2) + 3, 4 * (cls // 2) : 4 * (cls // 2) + 3] += 1.0
    feeds = {"images": images.astype(np.float32), "labels": np.eye(C, dtype=np.float32)[classes]}
    training = differentiate(_small_cnn(rng, batch).function, "objective", optimizer=SGD(0.1, 0.9))
    training.compile(backend)
    losses = [training.step(feeds) for _ in range(25)]
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses


def test_adam_three_steps_match_numpy(install_registry, rng) -> None:
    """Adam's moments, bias correction and weight decay, step for step, against a numpy
    transcription of PyTorch's definition fed the hand-computed gradients."""
    from glow_core.training import Adam

    install_backend(install_registry, "interpreter")
    weights = _weights(rng)
    x, y = _batch(rng)
    adam = Adam(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=1e-2)
    training = differentiate(_mlp(weights).function, "objective", optimizer=adam).compile("interpreter")
    expected = {k: v.astype(np.float64) for k, v in weights.items()}
    m = {k: np.zeros_like(v) for k, v in expected.items()}
    v2 = {k: np.zeros_like(v) for k, v in expected.items()}
    for t in range(1, 4):
        training.step({"x": x, "labels": y})
        grads = _numpy_gradients(expected, x.astype(np.float64), y.astype(np.float64))
        for k, g in grads.items():
            g = g + adam.weight_decay * expected[k]
            m[k] = adam.beta1 * m[k] + (1 - adam.beta1) * g
            v2[k] = adam.beta2 * v2[k] + (1 - adam.beta2) * g * g
            m_hat, v_hat = m[k] / (1 - adam.beta1**t), v2[k] / (1 - adam.beta2**t)
            expected[k] = expected[k] - adam.lr * m_hat / (np.sqrt(v_hat) + adam.eps)
    for k, value in expected.items():
        assert np.abs(training.weights[k] - value).max() <= 1e-4 * max(1.0, np.abs(value).max()), k
    assert any(np.abs(training.weights[k] - weights[k]).max() > 1e-3 for k in weights)  # it moved


def test_training_arena_is_planned(install_registry, rng) -> None:
    """The activations kept for the backward pass are ordinary buffers: the planner reuses
    memory among them (peak below the sum) and the arena holds more than inference's."""
    from glow_core.plugins import get_backend
    from glow_core.report import CompileReport
    from glow_core.runtime.pipeline import compile_stages

    install_backend(install_registry, "interpreter")
    model = _small_cnn(rng, 12)
    inference = CompileReport.of(compile_stages(model, get_backend("interpreter")))
    report = differentiate(model.function, "objective", optimizer=SGD(0.1, 0.9)).report("interpreter")
    assert report.peak_live_bytes < report.activation_bytes_total
    assert report.arena_bytes > inference.arena_bytes
    assert report.instructions > inference.instructions


def test_onnx_mobilenet_block_trains(install_registry, rng) -> None:
    """An imported ONNX model (initializers are Constants): depthwise and pointwise Conv,
    BatchNorm in training mode, ReLU6 (Clip) and a residual Add; the loss pulls the output
    toward zero, and falls."""
    from glow_core import model_zoo
    from glow_core.runtime.pipeline import load_model

    install_backend(install_registry, "interpreter")
    fn = load_model(model_zoo.mobilenetv2_block()).function
    out = fn.saves[0].operand("input")
    b = fn.builder()
    b.save(b.ReduceSum(b.Mul(out, out), axes=tuple(range(out.type.rank))), "objective")
    training = differentiate(fn, "objective", optimizer=SGD(1e-4, 0.9)).compile("interpreter")
    assert sum(1 for name in training.state if name.endswith(("mean", "var"))) >= 6  # 3 BatchNorms
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(p.type.dtype) for p in fn.inputs}
    losses = [training.step(feeds) for _ in range(4)]
    assert losses[-1] < 0.97 * losses[0], losses
