"""The quantize pass on a residual CNN: each residual Add becomes one ``QuantizedAdd`` (the
Relu or Clip right after it fused as saturation bounds) where the backend declares the
node, and that node's own lowering where it does not; MaxPool runs on the integers."""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from glow_core import Builder, Module
from glow_core.runtime.pipeline import compile_stages, load_model
from glow_core.types import ElemKind

SHAPE = (2, 8, 10, 10)


def _residual_cnn(seed: int = 0) -> Module:
    """x -> conv -> relu -> conv -> (+ x) -> relu -> conv -> (+ that) -> clip(0, 6) -> maxpool
    -> fc -> out: two residual sums, one with each activation the pass fuses."""
    rng = np.random.default_rng(seed)
    m = Module()
    b = Builder(m.create_function())
    x = b.placeholder("x", SHAPE)

    def conv(value, name):
        w = m.create_constant(f"{name}/w", (0.2 * rng.standard_normal((8, 8, 3, 3))).astype(np.float32))
        bias = m.create_constant(f"{name}/b", (0.1 * rng.standard_normal(8)).astype(np.float32))
        return b.conv(value, w, bias, pads=(1, 1, 1, 1), name=name)

    y = b.Relu(conv(x, "conv1"), name="relu1")
    block1 = b.Relu(b.Add(conv(y, "conv2"), x, name="add1"), name="relu2")
    block2 = b.Clip(b.Add(conv(block1, "conv3"), block1, name="add2"), low=0.0, high=6.0, name="clip")
    pooled = b.MaxPool(block2, kernel=(2, 2), strides=(2, 2), name="pool")
    flat = b.reshape(pooled, (SHAPE[0], 8 * 5 * 5), name="flat")
    fw = m.create_constant("fc/w", (0.1 * rng.standard_normal((200, 10))).astype(np.float32))
    fb = m.create_constant("fc/b", np.zeros(10, np.float32))
    b.save(b.fully_connected(flat, fw, fb, name="fc"), "out")
    return m


@pytest.fixture(scope="module")
def cnn_and_profile():
    rng = np.random.default_rng(1)
    calibration = [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(3)]
    profile = glow_core.profile(_residual_cnn(), calibration, "interpreter")
    return profile, {"x": rng.standard_normal(SHAPE).astype(np.float32)}


def _without_quantized_add(backend_name: str):
    """``backend_name``'s backend with QuantizedAdd taken out of its declared support."""

    class WithoutQuantizedAdd(type(glow_core.plugins.get_backend(backend_name))):
        def info(self):
            info = super().info()
            supports = {k: v for k, v in info.supports.items() if k != "QuantizedAdd"}
            return info.model_copy(update={"supports": supports})

    return WithoutQuantizedAdd()


def _reads_integer_layers(node) -> bool:
    """Whether a QuantizedConv's result reaches ``node``, through any number of nodes."""
    seen, todo = set(), list(node.inputs)
    while todo:
        n = todo.pop()
        if n.kind == "QuantizedConv":
            return True
        if id(n) not in seen:
            seen.add(id(n))
            todo.extend(n.inputs)
    return False


def test_residual_adds_become_quantized_adds_with_the_activation_fused(cnn_and_profile):
    profile, _ = cnn_and_profile
    stages = compile_stages(
        load_model(_residual_cnn()),
        glow_core.plugins.get_backend("cpu"),
        precision=glow_core.Quantize(profile),
    )
    nodes = stages.function.nodes
    adds = [n for n in nodes if n.kind == "QuantizedAdd"]
    assert len(adds) == 2 and all(n.type.elem is ElemKind.int8 for n in adds)
    report = stages.precision.quantization
    assert {"add1", "relu2", "add2", "clip", "pool"} <= set(report.quantized) and not report.kept_float
    by_name = {n.name: n for n in adds}
    relu_add, clip_add = by_name["add1/int"], by_name["add2/int"]
    # the fused activation's 0.0 is the output's zero point, the lower saturation bound; the
    # result takes the activation's own (profiled) range, so its top is the kind's
    for fused in (relu_add, clip_add):
        assert fused.low == fused.output_offset and fused.high == 127
    # no float arithmetic between the layers: the Adds left quantize the input (float64,
    # before the first integer layer), none reads an integer layer's result; the pool is int8
    adds = [n for n in nodes if n.kind == "Add"]
    assert adds and all(n.type.elem is ElemKind.float64 and not _reads_integer_layers(n) for n in adds)
    assert [n.type.elem for n in nodes if n.kind == "MaxPool"] == [ElemKind.int8]


@pytest.mark.parametrize("schema", ["symmetric", "symmetric-uint8"])
def test_cpu_and_interpreter_agree_bit_for_bit_and_with_the_float_model(cnn_and_profile, schema):
    profile, x = cnn_and_profile
    mode = glow_core.Quantize(profile, schema=schema, per_channel=True)
    m = _residual_cnn()
    cpu = glow_core.compile(m, "cpu", precision=mode).run(x)["out"]
    interpreter = glow_core.compile(m, "interpreter", precision=mode).run(x)["out"]
    np.testing.assert_array_equal(cpu, interpreter)
    reference = glow_core.compile(m, "interpreter").run(x)["out"].astype(np.float64)
    cosine = np.sum(cpu * reference) / (np.linalg.norm(cpu) * np.linalg.norm(reference))
    assert cosine > 0.999
    assert np.abs(cpu - reference).max() < 0.1 * np.abs(reference).max()


def test_a_backend_without_quantized_add_gets_its_lowering_with_the_same_result(cnn_and_profile):
    """glow-cpu keeps QuantizedAdd whole when it declares it; with the declaration withdrawn
    the pass builds the node's lowering instead (float64 primitives, the fused activation
    included), so the result is the same to the bit."""
    profile, x = cnn_and_profile
    mode = glow_core.Quantize(profile)
    m = _residual_cnn()
    backend = _without_quantized_add("cpu")
    stages = compile_stages(load_model(m), backend, precision=mode)
    kinds = {n.kind for n in stages.function.nodes}
    assert "QuantizedAdd" not in kinds and "QuantizedConv" in kinds
    assert {"add1", "relu2", "add2", "clip"} <= set(stages.precision.quantization.quantized)
    got = glow_core.compile(m, backend, precision=mode).run(x)["out"]
    np.testing.assert_array_equal(got, glow_core.compile(m, "cpu", precision=mode).run(x)["out"])


def test_a_kept_activation_is_not_fused(cnn_and_profile):
    profile, x = cnn_and_profile
    mode = glow_core.Quantize(profile, keep={"relu2"})
    m = _residual_cnn()
    stages = compile_stages(load_model(m), glow_core.plugins.get_backend("cpu"), precision=mode)
    report = stages.precision.quantization
    assert report.kept_float == {"relu2": "kept by request"} and "add1" in report.quantized
    add1 = next(n for n in stages.function.nodes if n.name == "add1/int")
    assert add1.low == -128  # the Relu stays float, after a dequantization
    got = glow_core.compile(m, "cpu", precision=mode).run(x)["out"]
    np.testing.assert_array_equal(got, glow_core.compile(m, "interpreter", precision=mode).run(x)["out"])
