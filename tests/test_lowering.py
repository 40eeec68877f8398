"""Lowering: every high-level node becomes primitives that verify and compute what an
independent float64 numpy implementation computes."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conv_oracle import conv2d
from layer_oracles import LAYER_ORACLES
from pool_oracles import POOL_ORACLES
from quant_oracles import QUANT_ORACLES

import glow_core.graph.nodes  # noqa: F401 - registers the high-level nodes
from glow_core.accuracy import relative_error
from glow_core.graph import Module, Node
from glow_core.graph.verifier import verify
from glow_core.lowering import lower_function
from glow_core.lowering.evaluate import evaluate
from glow_core.spec import NODES, Example, ex
from glow_core.types import Type

TOLERANCE = 1e-5

# ---- independent float64 oracles --------------------------------------------------------


def _activated(y: np.ndarray, activation: str, args: tuple[float, ...]) -> np.ndarray:
    """A fused activation, applied after the bias."""
    if activation == "relu":
        return np.where(y > 0, y, 0.0)
    if activation == "clip":
        return np.minimum(np.maximum(y, args[0]), args[1])
    assert activation == "none"
    return y


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, axis: int, epsilon: float) -> np.ndarray:
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * scale + bias


def _batch_norm(x, scale, bias, mean, var, epsilon) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    normalized = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon)
    return normalized * scale.reshape(shape) + bias.reshape(shape)


def _clip(x: np.ndarray, low: float, high: float) -> np.ndarray:
    out = x.copy()
    out[out < low] = low
    out[out > high] = high
    return out


_erf = np.vectorize(math.erf)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _rms_norm(x: np.ndarray, scale: np.ndarray, axis: int, epsilon: float, stash: str) -> np.ndarray:
    axes = tuple(range(axis % x.ndim, x.ndim))
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + epsilon) * scale


def _standardized(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + epsilon)


def _group_norm(x, scale, bias, num_groups, epsilon, stash) -> np.ndarray:
    n, c = x.shape[:2]
    y = _standardized(x.reshape(n, num_groups, -1), (2,), epsilon)
    if scale.shape[0] == num_groups != c:
        return (y * scale.reshape(1, -1, 1) + bias.reshape(1, -1, 1)).reshape(x.shape)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)


def _instance_norm(x, scale, bias, epsilon) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = _standardized(x, tuple(range(2, x.ndim)), epsilon)
    return y * scale.reshape(shape) + bias.reshape(shape)


def _attention(q, k, v, bias, scale, softcap) -> np.ndarray:
    """Per head, softmax(q k^T scale + bias) v; key/value heads repeated for query groups;
    a row whose bias is all -inf gives zeros."""
    reps = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    if bias is None:
        return _softmax(scores, -1) @ v
    logits = scores + bias
    peak = logits.max(axis=-1, keepdims=True)
    exps = np.exp(logits - np.where(np.isneginf(peak), 0.0, peak))
    total = exps.sum(axis=-1, keepdims=True)
    probs = exps / np.where(total == 0, 1.0, total)
    masked = np.isneginf(np.broadcast_to(bias, logits.shape).max(axis=-1, keepdims=True))
    return np.where(masked, 0.0, probs) @ v


ORACLES: dict[str, Callable[..., np.ndarray]] = {
    "Conv": lambda x, w, b, strides, pads, dilations, group, activation, activation_args: _activated(
        conv2d(x, w, b, strides, pads, dilations, group), activation, activation_args
    ),
    "FullyConnected": lambda x, w, b, activation, activation_args: _activated(
        x @ w + b, activation, activation_args
    ),
    "Relu": lambda x: np.where(x > 0, x, 0.0),
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Clip": lambda x, low, high: _clip(x, low, high),
    "LeakyRelu": lambda x, alpha: np.where(x >= 0, x, alpha * x),
    "Softmax": lambda x, axis: _softmax(x, axis),
    "ReduceMean": lambda x, axes: x.mean(axis=axes, keepdims=True),
    "LayerNorm": lambda x, scale, bias, axis, epsilon: _layer_norm(x, scale, bias, axis, epsilon),
    "BatchNorm": lambda x, scale, bias, mean, var, epsilon: _batch_norm(x, scale, bias, mean, var, epsilon),
    "Gelu": _gelu,
    "Swish": lambda x, alpha: x / (1.0 + np.exp(-alpha * x)),
    "HardSigmoid": lambda x, alpha, beta: np.clip(alpha * x + beta, 0.0, 1.0),
    "HardSwish": lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "Mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "LogSoftmax": _log_softmax,
    "RMSNorm": _rms_norm,
    "GroupNorm": _group_norm,
    "InstanceNorm": _instance_norm,
    "Attention": lambda q, k, v, scale, softcap, softmax_kind: _attention(q, k, v, None, scale, softcap),
    "MaskedAttention": lambda q, k, v, bias, scale, softcap, softmax_kind: _attention(
        q, k, v, bias, scale, softcap
    ),
    **LAYER_ORACLES,
    **POOL_ORACLES,
    **QUANT_ORACLES,
}

# Operands that must be positive (a variance under a square root).
POSITIVE_OPERANDS = {("BatchNorm", "var")}

EXTRA_CASES: list[tuple[str, Example, str]] = [
    (
        "Conv",
        ex("f32[2,4,7,6]", "f32[6,2,3,2]", "f32[6]", strides=(2, 1), pads=(1, 0, 1, 1), group=2),
        "groups",
    ),
    ("Conv", ex("f32[1,3,9,9]", "f32[3,1,3,3]", "f32[3]", dilations=(2, 2), group=3), "depthwise-dilated"),
    ("Conv", ex("f32[1,2,5,5]", "f32[4,2,1,1]", "f32[4]"), "pointwise"),
    ("FullyConnected", ex("f32[1,7]", "f32[7,1]", "f32[1]"), "single"),
    ("FullyConnected", ex("f32[3,7]", "f32[7,4]", "f32[4]", activation="relu"), "fused-relu"),
    (
        "Conv",
        ex("f32[1,2,5,5]", "f32[4,2,3,3]", "f32[4]", activation="clip", activation_args=(-0.5, 0.5)),
        "fused-clip",
    ),
    ("Relu", ex("f32[2,3,5]"), "rank3"),
    ("Relu", ex("f32[]"), "scalar"),
    ("Sigmoid", ex("f32[17]"), "rank1"),
    ("Clip", ex("f32[4,5]", low=-0.5), "low-only"),
    ("Clip", ex("f32[4,5]", high=0.25), "high-only"),
    ("Clip", ex("f32[4,5]"), "unbounded"),
    ("LeakyRelu", ex("f32[3,4]"), "default-alpha"),
    ("LeakyRelu", ex("f32[3,4]", alpha=2.5), "alpha>1"),
    ("LeakyRelu", ex("f32[6]", alpha=-0.5), "negative-alpha"),
    ("Softmax", ex("f32[3,4,5]", axis=0), "axis0"),
    ("Softmax", ex("f32[3,4,5]", axis=-1), "axis-1"),
    ("Softmax", ex("f32[3,4,5]", axis=-2), "axis-2"),
    ("Softmax", ex("f32[9]", axis=0), "rank1"),
    ("ReduceMean", ex("f32[2,3,4]", axes=(0,)), "axis0"),
    ("ReduceMean", ex("f32[2,3,4]", axes=(0, 1, 2)), "all"),
    ("ReduceMean", ex("f32[5,6]", axes=(1,)), "rows"),
    ("LayerNorm", ex("f32[2,3,4]", "f32[3,4]", "f32[3,4]", axis=1), "axis1"),
    ("LayerNorm", ex("f32[2,3,4]", "f32[4]", "f32[3,4]", axis=-2, epsilon=1e-3), "broadcast-scale"),
    ("LayerNorm", ex("f32[6,10]", "f32[10]", "f32[10]"), "rank2"),
    ("BatchNorm", ex("f32[3,5]", "f32[5]", "f32[5]", "f32[5]", "f32[5]"), "rank2"),
    ("BatchNorm", ex("f32[1,2,3,4,2]", "f32[2]", "f32[2]", "f32[2]", "f32[2]", epsilon=1e-3), "rank5"),
    ("Gelu", ex("f32[]"), "scalar"),
    ("Swish", ex("f32[2,3,4]", alpha=-0.5), "negative-alpha"),
    ("HardSigmoid", ex("f32[5,6]", alpha=0.5, beta=0.1), "alpha-beta"),
    ("LogSoftmax", ex("f32[3,4,5]", axis=0), "axis0"),
    ("RMSNorm", ex("f32[6]", "f32[6]", epsilon=1e-3), "rank1"),
    ("RMSNorm", ex("f32[2,3,4]", "f32[1]", axis=0), "axis0"),
    ("GroupNorm", ex("f32[1,4,3]", "f32[4]", "f32[4]", num_groups=4), "group-per-channel"),
    ("InstanceNorm", ex("f32[1,2,3,4,2]", "f32[2]", "f32[2]", epsilon=1e-3), "rank5"),
    ("Attention", ex("f32[2,6,4,8]", "f32[2,2,7,8]", "f32[2,2,7,5]", scale=0.125), "grouped-query"),
    ("MaskedAttention", ex("f32[1,4,3,8]", "f32[1,1,6,8]", "f32[1,1,6,8]", "f32[1,1,1,6]", scale=0.3), "mqa"),
]


def _cases() -> list[Any]:
    cases = [
        pytest.param(kind, example, id=f"{kind}[example{i}]")
        for kind in sorted(NODES)
        for i, example in enumerate(NODES[kind].examples)
    ]
    cases += [pytest.param(kind, example, id=f"{kind}[{label}]") for kind, example, label in EXTRA_CASES]
    return cases


def _operand_names(kind: str, types: list[Type]) -> list[str]:
    """The placeholder names: the declared operands, numbered for a variadic one (Einsum)."""
    spec = NODES[kind]
    return [f"{spec.operands[0]}{i}" for i in range(len(types))] if spec.variadic else list(spec.operands)


def _one_node_module(kind: str, types: list[Type], attrs: dict[str, Any]) -> Module:
    """A module whose function applies ``kind`` to placeholders and saves the result as ``out``."""
    m = Module(kind.lower())
    fn = m.create_function()
    b = fn.builder()
    names = _operand_names(kind, types)
    inputs = [b.placeholder(name, t.shape, t.elem) for name, t in zip(names, types, strict=True)]
    b.save(b.create(kind, *inputs, name="node", **attrs), "out")
    return m


def _feeds(
    kind: str, types: list[Type], rng: np.random.Generator, attrs: dict[str, Any]
) -> dict[str, np.ndarray]:
    spec = NODES[kind]
    if (
        kind in LAYER_ORACLES or kind in POOL_ORACLES or kind in QUANT_ORACLES
    ) and spec.sample is not None:  # valid sequence lengths, indices...
        return dict(zip(spec.operands, spec.sample_inputs(rng, types, attrs), strict=True))
    feeds = {}
    for name, t in zip(_operand_names(kind, types), types, strict=True):
        value = rng.standard_normal(t.shape)
        if (kind, name) in POSITIVE_OPERANDS:
            value = np.abs(value) + 0.5
        feeds[name] = value.astype(t.dtype)
    return feeds


def test_every_node_kind_has_an_oracle() -> None:
    """Each high-level node kind is checked against an independent implementation here."""
    assert set(NODES) <= set(ORACLES), f"no oracle for {set(NODES) - set(ORACLES)}"


@pytest.mark.parametrize(("kind", "example"), _cases())
def test_lowering_matches_oracle(kind: str, example: Example, request: pytest.FixtureRequest) -> None:
    """Lowered: only primitives and Saves remain, it verifies, and it computes the oracle's result."""
    spec = NODES[kind]
    types = example.types()
    attrs = spec.complete_attrs(example.attrs)
    m = _one_node_module(kind, types, example.attrs)
    fn = m.function
    result_type = fn.saves[0].inputs[0].type
    verify(fn)

    assert lower_function(fn) is True
    kinds = {n.kind for n in fn.nodes}
    assert all(n.spec.is_primitive or n.kind == "Save" for n in fn.nodes), kinds
    assert kind not in kinds
    verify(fn)
    assert fn.saves[0].inputs[0].type == result_type, "lowering keeps the result type"
    assert lower_function(fn) is False, "nothing is left to lower"

    rng = np.random.default_rng(zlib.crc32(request.node.callspec.id.encode()))
    feeds = _feeds(kind, types, rng, attrs)
    out = evaluate(m, feeds)["out"]
    wide = [feeds[n].astype(np.float64) for n in _operand_names(kind, types)]
    if kind in QUANT_ORACLES:  # the integer kinds say the result's range: operands as stored
        wide = [feeds[n] for n in _operand_names(kind, types)]
    expected = ORACLES[kind](*([wide] if spec.variadic else wide), **attrs)
    assert out.shape == expected.shape == result_type.shape
    assert out.dtype == result_type.dtype
    assert relative_error(out, expected) < TOLERANCE


def test_lowered_node_names_carry_the_node_name() -> None:
    """Nodes created by a lowering are named after the node they replace (``node/...``)."""
    m = _one_node_module("LayerNorm", [Type((2, 8)), Type((8,)), Type((8,))], {})
    lower_function(m.function)
    ops = [n for n in m.function.nodes if n.kind != "Save"]
    assert ops and all(n.name.startswith("node/") for n in ops)


def _conv_relu_softmax(rng: np.random.Generator) -> Module:
    m = Module("net")
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (1, 2, 6, 6))
    w = b.constant(rng.standard_normal((3, 2, 3, 3)), name="w")
    bias = b.constant(rng.standard_normal(3), name="bias")
    conv = b.conv(x, w, bias, pads=(1, 1, 1, 1), name="conv")
    act = b.Relu(conv, name="relu")
    b.save(b.Softmax(act, axis=1, name="softmax"), "y")
    return m


def test_should_lower_keeps_conv() -> None:
    """With a should_lower that keeps Conv, Conv stays and everything else is lowered."""
    rng = np.random.default_rng(zlib.crc32(b"should_lower"))
    m = _conv_relu_softmax(rng)
    fn = m.function
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    before = evaluate(m, {"x": x})["y"]

    asked: list[str] = []

    def keep_conv(n: Node) -> bool:
        asked.append(n.kind)
        return n.kind != "Conv"

    assert lower_function(fn, should_lower=keep_conv) is True
    high_level = [n for n in fn.nodes if not n.spec.is_primitive and n.kind != "Save"]
    assert [n.kind for n in high_level] == ["Conv"]
    assert high_level[0].name == "conv"
    assert {"Relu", "Softmax", "Conv"} <= set(asked)
    assert not any(n.kind in ("Relu", "Softmax") for n in fn.nodes)
    verify(fn)
    assert lower_function(fn, should_lower=keep_conv) is False, "a kept node is not lowered later"

    np.testing.assert_array_equal(evaluate(m, {"x": x})["y"], before)
    w = m.constants["w"].value.astype(np.float64)
    bias = m.constants["bias"].value.astype(np.float64)
    conv = conv2d(x.astype(np.float64), w, bias, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert relative_error(before, _softmax(np.maximum(conv, 0.0), 1)) < TOLERANCE

    assert lower_function(fn) is True
    assert all(n.spec.is_primitive or n.kind == "Save" for n in fn.nodes)
    verify(fn)
    np.testing.assert_array_equal(evaluate(m, {"x": x})["y"], before)


def test_lower_nothing() -> None:
    """A should_lower that refuses everything changes nothing."""
    m = _conv_relu_softmax(np.random.default_rng(zlib.crc32(b"nothing")))
    kinds = sorted(n.kind for n in m.function.nodes)
    assert lower_function(m.function, should_lower=lambda n: False) is False
    assert sorted(n.kind for n in m.function.nodes) == kinds
