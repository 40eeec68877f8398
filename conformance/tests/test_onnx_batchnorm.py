"""fold_conv_batchnorm: the folded model computes what the original does (onnx.reference,
float32 tolerance), and only foldable pairs are folded."""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from glow_conformance.onnx_batchnorm import fold_conv_batchnorm
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Seeded per test (this folder runs without the repository's root conftest)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _bn_params(rng: np.random.Generator, prefix: str, channels: int) -> list[onnx.TensorProto]:
    values = {
        "gamma": rng.uniform(0.5, 1.5, channels),
        "beta": rng.standard_normal(channels),
        "mean": rng.standard_normal(channels),
        "var": rng.uniform(0.2, 2.0, channels),
    }
    return [numpy_helper.from_array(v.astype(np.float32), f"{prefix}.{k}") for k, v in values.items()]


def _model(rng: np.random.Generator) -> onnx.ModelProto:
    """x -> Conv(bias) -> BN -> Relu -> depthwise Conv(no bias) -> BN -> y, plus a Conv whose
    output also leaves the graph (so its BN must stay) -> BN -> z."""
    c = 6
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((c, 1, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w3"),
        *_bn_params(rng, "bn1", c),
        *_bn_params(rng, "bn2", c),
        *_bn_params(rng, "bn3", c),
    ]

    def bn(name: str, x: str, out: str) -> onnx.NodeProto:
        p = [f"{name}.{k}" for k in ("gamma", "beta", "mean", "var")]
        return helper.make_node("BatchNormalization", [x, *p], [out], epsilon=1e-3)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        bn("bn1", "c1", "n1"),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=c, strides=[2, 2]),
        bn("bn2", "c2", "y"),
        helper.make_node("Conv", ["r1", "w3"], ["c3"]),
        bn("bn3", "c3", "z"),
    ]
    shapes = {"y": [2, c, 4, 4], "z": [2, c, 9, 9], "c3": [2, c, 9, 9]}
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    graph = helper.make_graph(
        nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 9])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_folded_model_computes_the_same(rng: np.random.Generator) -> None:
    model = _model(rng)
    folded = fold_conv_batchnorm(model)
    onnx.checker.check_model(folded)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = ReferenceEvaluator(folded).run(None, {"x": x})
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape
        assert np.max(np.abs(g - w)) <= 1e-4 * np.max(np.abs(w)), "folded outputs differ"


def test_only_pairs_with_a_private_conv_output_are_folded(rng: np.random.Generator) -> None:
    model = _model(rng)
    folded = fold_conv_batchnorm(model)
    kinds = [n.op_type for n in folded.graph.node]
    # bn1 and bn2 folded; bn3 stays: its Conv's output c3 is also a graph output
    assert kinds.count("BatchNormalization") == 1
    assert kinds.count("Conv") == 3
    names = {t.name for t in folded.graph.initializer}
    assert not {"w1", "b1", "w2", "bn1.gamma", "bn2.var"} & names, "replaced weights kept"
    assert {"w3", "bn3.gamma"} <= names
    # the caller's model is untouched
    assert [n.op_type for n in model.graph.node].count("BatchNormalization") == 3
