"""onnxruntime-quantized QDQ models: fold-qdq turns their Conv/Gemm layers into int8 nodes,
which glow-cpu runs on its int8 kernels, within one output step of onnxruntime running
the same QDQ model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from glow_conformance.quantized_models import onnxruntime_qdq, output_step
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import compile_stages, load_model

pytest.importorskip("onnxruntime.quantization")


def _onnxruntime(qdq: onnx.ModelProto, inputs) -> np.ndarray:
    session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def _check(qdq: onnx.ModelProto, steps: float) -> None:
    ops = [n.op_type for n in qdq.graph.node]
    stages = compile_stages(load_model(qdq), glow_core.plugins.get_backend("cpu"))
    kinds = [n.kind for n in stages.function.nodes]
    assert kinds.count("QuantizedConv") == ops.count("Conv")  # every Conv runs on the int8 kernels
    assert kinds.count("QuantizedFullyConnected") == ops.count("Gemm")
    assert "Convolution" not in kinds and "MatMul" not in kinds
    inputs = random_inputs(qdq, 5)
    expected = _onnxruntime(qdq, inputs)
    got = next(iter(glow_core.compile(qdq, "cpu").run(inputs).values()))
    difference = np.abs(got.astype(np.float64) - expected) / output_step(qdq)
    assert difference.max() <= steps, f"{difference.max():.2f} output steps from onnxruntime"
    assert np.unique(expected).size > 3  # the output is not saturated


def test_small_cnn_qdq_runs_on_int8_kernels_within_one_step_of_onnxruntime(tmp_path):
    _check(onnxruntime_qdq(MODELS["small_cnn"](batch=2), tmp_path), steps=1.0)


def test_qdq_model_on_cpu_is_within_one_step_of_the_interpreter(tmp_path):
    """The int8 layers are bit-equal (backends/glow_cpu/tests/test_cpu_int8.py); the float32
    arithmetic between them (Softmax's exp, pooling) may differ by an ulp, which can flip a
    requantization by one step."""
    qdq = onnxruntime_qdq(MODELS["small_cnn"](batch=2), tmp_path)
    inputs = random_inputs(qdq, 11)
    cpu = glow_core.compile(qdq, "cpu").run(inputs)
    reference = glow_core.compile(qdq, "interpreter").run(inputs)
    for name, value in reference.items():
        assert np.abs(cpu[name] - value).max() <= output_step(qdq) * 1.001


def test_a_weight_zero_point_keeps_the_layer_float_and_correct(tmp_path):
    """Asymmetric int8 weights are not what the int8 nodes declare: the layer stays the
    imported float arithmetic, which still computes the QDQ model's meaning."""
    qdq = onnxruntime_qdq(MODELS["small_cnn"](batch=1), tmp_path)
    inits = {t.name: t for t in qdq.graph.initializer}
    conv = next(n for n in qdq.graph.node if n.op_type == "Conv")
    dq = next(n for n in qdq.graph.node if n.output[0] == conv.input[1])
    zero = onnx.numpy_helper.to_array(inits[dq.input[2]]).copy()
    zero[0] = 3
    inits[dq.input[2]].CopyFrom(onnx.numpy_helper.from_array(zero, dq.input[2]))
    kinds = [
        n.kind for n in compile_stages(load_model(qdq), glow_core.plugins.get_backend("cpu")).function.nodes
    ]
    assert kinds.count("QuantizedConv") == [n.op_type for n in qdq.graph.node].count("Conv") - 1
    inputs = random_inputs(qdq, 3)
    got = next(iter(glow_core.compile(qdq, "cpu").run(inputs).values()))
    assert np.abs(got - _onnxruntime(qdq, inputs)).max() <= output_step(qdq) * 1.001


@pytest.mark.slow
def test_resnet50_qdq_runs_on_int8_kernels_near_onnxruntime(tmp_path):
    _check(onnxruntime_qdq(MODELS["resnet50"](batch=1), tmp_path, calibration=2), steps=RESNET50_STEPS)


RESNET50_STEPS = 3.0
"""Rounding differences (glow requantizes in float64, onnxruntime in float32) flip an
activation by one step here and there, and 50 layers carry some of them to the logits."""


def _hand_qdq_conv(rng, activation: str) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(w int8 per channel), DQ(b int32)) -> activation -> Q -> DQ."""
    from onnx import TensorProto, helper, numpy_helper

    cout, cin = 6, 4
    sx, sw, sy = 0.02, rng.uniform(0.002, 0.01, cout).astype(np.float32), 0.03
    inits = [
        numpy_helper.from_array(np.array(sx, np.float32), "sx"),
        numpy_helper.from_array(np.array(-5, np.int8), "zx"),
        numpy_helper.from_array(rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8), "w"),
        numpy_helper.from_array(sw, "sw"),
        numpy_helper.from_array(np.zeros(cout, np.int8), "zw"),
        numpy_helper.from_array(rng.integers(-2000, 2000, cout).astype(np.int32), "b"),
        numpy_helper.from_array((np.float32(sx) * sw).astype(np.float32), "sb"),
        numpy_helper.from_array(np.zeros(cout, np.int32), "zb"),
        numpy_helper.from_array(np.array(sy, np.float32), "sy"),
        numpy_helper.from_array(np.array(-128 if activation != "none" else 3, np.int8), "zy"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(2.5, np.float32), "hi"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["conv"], pads=[1, 1, 1, 1]),
    ]
    if activation == "clip":
        nodes.append(helper.make_node("Clip", ["conv", "lo", "hi"], ["act"]))
    elif activation == "relu":
        nodes.append(helper.make_node("Relu", ["conv"], ["act"]))
    last = "conv" if activation == "none" else "act"
    nodes += [
        helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 9, 9])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("activation", ["none", "relu", "clip"])
def test_a_hand_written_qdq_conv_folds_with_its_activation(rng, activation):
    qdq = _hand_qdq_conv(rng, activation)
    kinds = [
        n.kind for n in compile_stages(load_model(qdq), glow_core.plugins.get_backend("cpu")).function.nodes
    ]
    assert "QuantizedConv" in kinds and not {"Conv", "Relu", "Clip", "Convolution"} & set(kinds)
    x = {"x": rng.standard_normal((1, 4, 9, 9)).astype(np.float32)}
    # The ONNX reference, not onnxruntime: full-range random int8 weights make onnxruntime's
    # AVX2 kernels (pmaddubsw) saturate, by up to 68 output steps on this graph.
    (expected,) = ReferenceEvaluator(qdq).run(None, x)
    got = glow_core.compile(qdq, "cpu").run(x)["y"]
    assert np.abs(got - expected).max() <= 0.03 * 1.001  # one step of the output scale
    assert np.unique(expected).size > 20
    if activation != "none":
        assert expected.min() >= 0 and got.min() >= 0
    if activation == "clip":
        assert got.max() <= 2.5 + 0.03


def _hand_qdq_add_pool(activation: str, pool_scale: float = 0.05) -> onnx.ModelProto:
    """a, c -> Q -> DQ -> Add -> activation -> Q -> DQ -> MaxPool(3x3, stride 2, pad 1)
    -> Q (``pool_scale``) -> DQ: a residual Add and a stem MaxPool as quantize_static writes them."""
    from onnx import TensorProto, helper, numpy_helper

    shape = [1, 5, 9, 11]
    inits = [
        numpy_helper.from_array(np.array(0.04, np.float32), "sa"),
        numpy_helper.from_array(np.array(-7, np.int8), "za"),
        numpy_helper.from_array(np.array(0.025, np.float32), "sc"),
        numpy_helper.from_array(np.array(12, np.uint8), "zc"),
        numpy_helper.from_array(np.array(0.05, np.float32), "sy"),
        numpy_helper.from_array(np.array(-128 if activation == "relu" else 4, np.int8), "zy"),
        numpy_helper.from_array(np.array(pool_scale, np.float32), "sp"),
        numpy_helper.from_array(np.array(-128 if activation == "relu" else 4, np.int8), "zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
        helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
        helper.make_node("QuantizeLinear", ["c", "sc", "zc"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "sc", "zc"], ["cd"]),
        helper.make_node("Add", ["ad", "cd"], ["sum"]),
    ]
    if activation == "relu":
        nodes.append(helper.make_node("Relu", ["sum"], ["act"]))
    nodes += [
        helper.make_node("QuantizeLinear", ["act" if activation == "relu" else "sum", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["yd"]),
        helper.make_node("MaxPool", ["yd"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["pool", "sp", "zp"], ["pq"]),
        helper.make_node("DequantizeLinear", ["pq", "sp", "zp"], ["p"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_add_pool",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("a", "c")],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 5, 5, 6])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("activation", ["none", "relu"])
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_hand_written_qdq_add_and_max_pool_fold_to_integers(rng, activation, backend):
    qdq = _hand_qdq_add_pool(activation)
    nodes = compile_stages(load_model(qdq), glow_core.plugins.get_backend(backend)).function.nodes
    pools = [n.type.elem.name for n in nodes if n.kind == "MaxPool"]
    assert pools == ["int8"]  # on the integers (max commutes with dequantization)
    if backend == "cpu":  # kept whole; the interpreter runs its float64 lowering
        assert "QuantizedAdd" in [n.kind for n in nodes] and "Relu" not in [n.kind for n in nodes]
    x = {n: (rng.standard_normal((1, 5, 9, 11)) * 2).astype(np.float32) for n in ("a", "c")}
    (expected,) = ReferenceEvaluator(qdq).run(None, x)
    got = glow_core.compile(qdq, backend).run(x)["p"]
    # glow requantizes in float64 and the reference in float32: one step apart at most
    assert np.abs(got - expected).max() <= 0.05 * 1.001
    assert np.mean(got == expected) > 0.95
    assert np.unique(expected).size > 20
    if activation == "relu":
        assert got.min() >= 0


def test_a_max_pool_that_changes_the_scale_is_not_folded(rng):
    qdq = _hand_qdq_add_pool("none", pool_scale=0.1)
    stages = compile_stages(load_model(qdq), glow_core.plugins.get_backend("cpu"))
    assert "QuantizedAdd" in [n.kind for n in stages.function.nodes]
    assert [n.type.elem.name for n in stages.function.nodes if n.kind == "MaxPool"] == ["float32"]
    x = {n: (rng.standard_normal((1, 5, 9, 11)) * 2).astype(np.float32) for n in ("a", "c")}
    (expected,) = ReferenceEvaluator(qdq).run(None, x)
    got = glow_core.compile(qdq, "cpu").run(x)["p"]
    assert np.abs(got - expected).max() <= 0.1 * 1.001


def _hand_qdq_batch_norm(
    rng, activation: str, input_kind: str = "int8", channels: int = 32
) -> onnx.ModelProto:
    """x -> Q -> DQ -> BatchNormalization(DQ(scale int8 per tensor), DQ(bias int32), mean, var)
    [-> Relu] -> Q -> DQ: a BatchNorm left beside its Conv, as onnxruntime 1.30's
    ``quant_pre_process`` + ``quantize_static`` write it (the Conv before it folds alone)."""
    from onnx import TensorProto, helper, numpy_helper

    sx, sy, s_gamma = 0.03, 0.02, 0.01
    gamma = rng.integers(-127, 128, channels).astype(np.int8)
    gamma[0] = -2  # the zero point: a channel the BatchNorm flattens to its shift
    gamma[1] = -100  # and a negative slope
    inits = [
        numpy_helper.from_array(np.array(sx, np.float32), "sx"),
        numpy_helper.from_array(np.array(3 if input_kind == "int8" else 131, input_kind), "zx"),
        numpy_helper.from_array(gamma, "g"),
        numpy_helper.from_array(np.array(s_gamma, np.float32), "sg"),
        numpy_helper.from_array(np.array(-2, np.int8), "zg"),
        numpy_helper.from_array(rng.integers(-3000, 3000, channels).astype(np.int32), "b"),
        numpy_helper.from_array(np.array([0.0004], np.float32), "sb"),  # [1]-shaped, as 1.30 writes it
        numpy_helper.from_array(np.array(0, np.int32), "zb"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.2, 3.0, channels).astype(np.float32), "var"),
        numpy_helper.from_array(np.array(sy, np.float32), "sy"),
        numpy_helper.from_array(np.array(-128 if activation == "relu" else -6, np.int8), "zy"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["g", "sg", "zg"], ["gd"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
        helper.make_node("BatchNormalization", ["xd", "gd", "bd", "mean", "var"], ["bn"], epsilon=1e-3),
    ]
    if activation == "relu":
        nodes.append(helper.make_node("Relu", ["bn"], ["act"]))
    nodes += [
        helper.make_node("QuantizeLinear", ["act" if activation == "relu" else "bn", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    shape = [2, channels, 16, 16]
    graph = helper.make_graph(
        nodes,
        "qdq_batch_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize("input_kind", ["int8", "uint8"])
@pytest.mark.parametrize("activation", ["none", "relu"])
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_qdq_batch_norm_beside_its_conv_folds_to_an_integer_layer(
    rng, monkeypatch, activation, backend, input_kind
):
    """The BatchNorm becomes a depthwise 1x1 QuantizedConv: no float arithmetic is left. The
    fold is not bit-equal by construction (the float graph rounds in float32 at each step;
    the fold rounds the shift to its accumulator step, see ``_fold_batch_norm``), but on
    these 32 random channels it equals the unfolded graph and the ONNX reference on every
    one of the 256 integers x_q can hold."""
    from glow_core.passes.manager import GRAPH_PASSES

    qdq = _hand_qdq_batch_norm(rng, activation, input_kind)
    nodes = compile_stages(load_model(qdq), glow_core.plugins.get_backend("cpu")).function.nodes
    (layer,) = [n for n in nodes if n.kind == "QuantizedConv"]
    assert layer.inputs[0].kind == "QuantizeLinear" and layer.group == 32  # x's integers, depthwise
    # the only float arithmetic left is the output's dequantization, (y_q - z) * s
    floats = [n.kind for n in nodes if n.type.elem.name == "float32" and n.kind not in ("Broadcast", "Save")]
    assert sorted(floats) == ["Convert", "Mul", "Sub"]
    info, zero = np.iinfo(input_kind), 3 if input_kind == "int8" else 131
    every_integer = (np.arange(info.min, info.max + 1, dtype=np.float32) - zero) * np.float32(
        0.03
    )  # x_q's values
    x = np.empty((2, 32, 16, 16), np.float32)
    x[0] = every_integer.reshape(16, 16)
    x[1] = rng.standard_normal((32, 16, 16)) * 2.5  # and beyond the range (saturation)
    (expected,) = ReferenceEvaluator(qdq).run(None, {"x": x})
    got = glow_core.compile(qdq, backend).run({"x": x})["y"]
    monkeypatch.setitem(GRAPH_PASSES, "fold-qdq", lambda fn: False)
    unfolded = glow_core.compile(qdq, "interpreter").run({"x": x})["y"]
    np.testing.assert_array_equal(got, unfolded)
    np.testing.assert_array_equal(got, expected)
    assert np.unique(expected).size > 200
    assert np.all(got[:, 0] == got[0, 0, 0, 0])  # gamma 0: the shift alone
    assert np.all(np.diff(got[0, 1].reshape(-1)) <= 0)  # a negative slope: decreasing in x_q
    if activation == "relu":
        assert got.min() == 0 and expected.min() == 0


def test_a_qdq_batch_norm_whose_float_result_is_read_twice_stays_float_and_correct(rng):
    """The float result also leaves the graph: folding would lose it, so the layer stays."""
    from onnx import TensorProto, helper

    qdq = _hand_qdq_batch_norm(rng, "none")
    qdq.graph.output.append(helper.make_tensor_value_info("bn", TensorProto.FLOAT, [2, 32, 16, 16]))
    kinds = [
        n.kind for n in compile_stages(load_model(qdq), glow_core.plugins.get_backend("cpu")).function.nodes
    ]
    assert "QuantizedConv" not in kinds
    x = {"x": (rng.standard_normal((2, 32, 16, 16)) * 2.5).astype(np.float32)}
    expected = ReferenceEvaluator(qdq).run(None, x)
    got = glow_core.compile(qdq, "cpu").run(x)
    np.testing.assert_allclose(got["bn"], expected[1], rtol=1e-5, atol=1e-5)
    assert np.abs(got["y"] - expected[0]).max() <= 0.02 * 1.001
