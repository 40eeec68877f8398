"""Layer nodes end to end: an ONNX model's LSTM/GRU/RNN (and ConvTranspose, Resize, Einsum)
reaches a backend that keeps the node as one IR instruction, and the interpreter keeping it
matches onnxruntime; a backend that lowers gets the primitives and the same numbers."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.accuracy import onnxruntime_outputs, relative_error
from glow_core.frontends.onnx import load_onnx
from glow_core.runtime.pipeline import compile_stages

F = TensorProto.FLOAT


def _model(node, inputs, outputs, initializers, opset: int = 22):
    graph = helper.make_graph(
        [node],
        "layer",
        [helper.make_tensor_value_info(name, F, shape) for name, shape in inputs],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
        [numpy_helper.from_array(v, name) for name, v in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _instruction_kinds(model, backend) -> Counter[str]:
    stages = compile_stages(load_onnx(model), backend, verify_each=True)
    assert stages.ir is not None
    return Counter(i.kind for i in stages.ir.compute_instrs())


def _check_kept(model, kind: str, feeds: dict[str, np.ndarray], tolerance: float = 1e-5) -> None:
    """Kept: one instruction of ``kind`` and no MatMul/Gather left of it; kept or lowered,
    every output within ``tolerance`` of onnxruntime."""
    keeping = InterpreterBackend(keep=(kind,))
    kinds = _instruction_kinds(model, keeping)
    assert kinds[kind] == 1, kinds
    assert kind not in _instruction_kinds(model, InterpreterBackend())
    expected = onnxruntime_outputs(model, feeds)
    for backend in (keeping, InterpreterBackend()):
        got = glow_core.compile(model, backend=backend).run(feeds)
        for name, want in expected.items():
            assert got[name].shape == want.shape
            assert relative_error(got[name], want) <= tolerance, (name, backend.keep)


@pytest.mark.parametrize(
    ("op", "direction", "layout"),
    [
        ("LSTM", "bidirectional", 0),
        ("GRU", "reverse", 0),
        ("RNN", "forward", 0),
    ],  # onnxruntime: layout 0 only
)
def test_a_kept_recurrence_is_one_instruction_and_matches_onnxruntime(op, direction, layout, rng) -> None:
    """Peepholes, initial states and sequence lengths all reach the kept node's operands."""
    seq, batch, width, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op] * hidden
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    x_shape = (batch, seq, width) if layout else (seq, batch, width)
    inits = {
        "w": rng.standard_normal((dirs, gates, width)).astype(np.float32) * 0.5,
        "r": rng.standard_normal((dirs, gates, hidden)).astype(np.float32) * 0.5,
        "b": rng.standard_normal((dirs, 2 * gates)).astype(np.float32) * 0.5,
        "lens": np.array([5, 2, 4], np.int32),
    }
    names = ["x", "w", "r", "b", "lens", "h0"] + (["c0", "p"] if op == "LSTM" else [])
    if op == "LSTM":
        inits["p"] = rng.standard_normal((dirs, 3 * hidden)).astype(np.float32) * 0.5
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction, layout=layout)
    inputs = [("x", x_shape), ("h0", state)] + ([("c0", state)] if op == "LSTM" else [])
    model = _model(node, inputs, outputs, inits)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs}
    _check_kept(model, op, feeds)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "output_padding": [1, 0], "pads": [1, 0, 0, 1]}),
        ((2, 4, 7), (4, 2, 3), {"strides": [2], "group": 2, "auto_pad": "SAME_UPPER"}),
        ((1, 2, 3, 4, 3), (2, 3, 2, 2, 2), {"strides": [2, 1, 2], "dilations": [1, 2, 1]}),
    ],
    ids=["2d-output-padding", "1d-grouped-same", "3d"],
)
def test_a_kept_conv_transpose_is_one_instruction_and_matches_onnxruntime(
    x_shape, w_shape, attrs, rng
) -> None:
    """auto_pad becomes explicit pads on the node; 1-D, 2-D and 3-D are one kind."""
    group = attrs.get("group", 1)
    inits = {
        "w": rng.standard_normal(w_shape).astype(np.float32),
        "b": rng.standard_normal(w_shape[1] * group).astype(np.float32),
    }
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    model = _model(node, [("x", x_shape)], ["y"], inits)
    _check_kept(model, "ConvTranspose", {"x": rng.standard_normal(x_shape).astype(np.float32)})


@pytest.mark.parametrize(
    ("inputs", "attrs"),
    [
        ({"scales": np.array([1, 1, 1.5, 0.75], np.float32)}, {"mode": "linear"}),
        ({"sizes": np.array([1, 3, 7, 2], np.int64)}, {"mode": "cubic", "antialias": 1}),
        ({"sizes": np.array([9, 3], np.int64)}, {"nearest_mode": "ceil", "axes": [2, 3]}),
    ],
    ids=["linear-scales", "cubic-antialias-sizes", "nearest-axes"],
)
def test_a_kept_resize_is_one_instruction_and_matches_onnxruntime(inputs, attrs, rng) -> None:
    """The importer resolves scales or sizes, axes and the policy into the node's geometry."""
    names = ["x", "", "scales" if "scales" in inputs else "", "sizes" if "sizes" in inputs else ""]
    node = helper.make_node("Resize", names, ["y"], **attrs)
    model = _model(node, [("x", (1, 3, 4, 6))], ["y"], inputs, opset=19)
    _check_kept(model, "Resize", {"x": rng.standard_normal((1, 3, 4, 6)).astype(np.float32)})


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("iij,j", [(3, 3, 4), (4,)]),
        ("...ij,...jk,kl->...il", [(2, 3, 4), (1, 4, 5), (5, 2)]),
    ],
    ids=["batched-matmul", "diagonal-implicit", "ellipsis-three-operands"],
)
def test_a_kept_einsum_is_one_instruction_and_matches_onnxruntime(equation, shapes, rng) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    model = _model(node, list(zip(names, shapes, strict=True)), ["y"], {})
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes, strict=True)}
    _check_kept(model, "Einsum", feeds)
