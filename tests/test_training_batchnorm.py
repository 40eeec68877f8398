"""BatchNorm in training mode: batch statistics forward, gradients against float64 central
differences of the training function's own loss, running statistics updated as PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glow_core import SGD, Module, differentiate
from glow_core.errors import DifferentiationError
from glow_core.lowering.evaluate import evaluate
from glow_core.training import LOSS_OUTPUT
from glow_core.training.differentiate import updated_name

STEP = 1e-6
EPS = 1e-5


def _model(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[Module, np.ndarray]:
    module = Module("bn")
    b = module.create_function().builder()
    channels = shape[1]
    x = b.constant(rng.standard_normal(shape) * 2 + 1, name="x", dtype=np.float64)
    scale = b.constant(rng.uniform(0.5, 2, channels), name="scale", dtype=np.float64)
    bias = b.constant(rng.standard_normal(channels), name="bias", dtype=np.float64)
    mean = b.constant(rng.standard_normal(channels), name="running_mean", dtype=np.float64)
    var = b.constant(rng.uniform(0.5, 2, channels), name="running_var", dtype=np.float64)
    y = b.BatchNorm(x, scale, bias, mean, var, epsilon=EPS)
    mix = rng.standard_normal(shape)
    b.save(
        b.ReduceSum(b.Mul(y, b.constant(mix, name="mix", dtype=np.float64)), axes=tuple(range(len(shape)))),
        "objective",
    )
    return module, mix


def _numpy_loss(x, scale, bias, mix) -> float:
    axes = tuple(a for a in range(x.ndim) if a != 1)
    per_channel = (1, -1) + (1,) * (x.ndim - 2)
    normalized = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + EPS)
    return float(np.sum((normalized * scale.reshape(per_channel) + bias.reshape(per_channel)) * mix))


@settings(max_examples=8, deadline=None)
@given(
    n=st.integers(2, 3),
    c=st.integers(1, 3),
    hw=st.integers(1, 3),
    rank=st.sampled_from([2, 4]),
    seed=st.integers(0, 2**31),
)
def test_training_mode_gradients_and_running_statistics(n, c, hw, rank, seed) -> None:
    rng = np.random.default_rng(seed)
    shape = (n, c) if rank == 2 else (n, c, hw, hw + 1)
    module, mix = _model(rng, shape)
    training = differentiate(module.function, "objective", ["x", "scale", "bias"], SGD(lr=1.0))
    state = {k: v.copy() for k, v in training.feeds({}).items()}  # weights, statistics, lr 1
    outputs = evaluate(training.module, state)

    # Forward: batch statistics, not the running ones.
    assert float(outputs[LOSS_OUTPUT].reshape(-1)[0]) == pytest.approx(
        _numpy_loss(state["x"], state["scale"], state["bias"], mix), rel=1e-9
    )
    # Backward: central differences of the training function's own loss.
    for name in ("x", "scale", "bias"):
        analytic = state[name] - outputs[updated_name(name)]
        numeric = np.zeros_like(analytic)
        for index in np.ndindex(analytic.shape):
            values = []
            for sign in (1, -1):
                feeds = {k: v.copy() for k, v in state.items()}
                feeds[name][index] += sign * STEP
                values.append(float(evaluate(training.module, feeds)[LOSS_OUTPUT].reshape(-1)[0]))
            numeric[index] = (values[0] - values[1]) / (2 * STEP)
        assert np.abs(analytic - numeric).max() / max(np.abs(numeric).max(), 1.0) < 1e-5, name
    # Running statistics: momentum 0.1, the unbiased batch variance.
    axes = tuple(a for a in range(len(shape)) if a != 1)
    x = state["x"]
    expected_mean = 0.9 * state["running_mean"] + 0.1 * x.mean(axes)
    expected_var = 0.9 * state["running_var"] + 0.1 * x.var(axes, ddof=1)
    np.testing.assert_allclose(outputs[updated_name("running_mean")], expected_mean, rtol=1e-12)
    np.testing.assert_allclose(outputs[updated_name("running_var")], expected_var, rtol=1e-12)


def test_running_statistics_are_not_parameters(rng) -> None:
    module, _ = _model(rng, (2, 3, 2, 2))
    training = differentiate(module.function, "objective")
    assert sorted(training.params) == ["bias", "mix", "scale", "x"]
    assert {"running_mean", "running_var"} <= set(training.state)
    with pytest.raises(DifferentiationError, match=r"'running_var' is a BatchNorm running statistic"):
        differentiate(module.function, "objective", ["scale", "running_var"])


def test_frozen_statistics_keep_inference_semantics(rng) -> None:
    module, _ = _model(rng, (2, 3, 2, 2))
    frozen = differentiate(module.function, "objective", ["scale"], batchnorm_momentum=None)
    assert "running_mean" not in frozen.state
    inference = evaluate(module, {})["objective"]
    np.testing.assert_allclose(evaluate(frozen.module, frozen.feeds({}))[LOSS_OUTPUT], inference, rtol=1e-12)
