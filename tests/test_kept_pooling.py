"""Pooling nodes end to end: each ONNX pooling op (MaxPool with its Indices, AveragePool,
LpPool, the global pools, MaxUnpool) reaches a backend that keeps its node as one IR
instruction, and the interpreter keeping it, or lowering it, matches onnxruntime. Lowered,
a 1-D or 2-D undilated window stays one MaxPool/AvgPool primitive (what CNNs compile to)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import onnxruntime_outputs, relative_error
from glow_core.frontends.onnx import load_onnx
from glow_core.runtime.pipeline import compile_stages

F = TensorProto.FLOAT


def _model(op: str, x_shape, outputs=("y",), initializers=None, inputs=("x",), **attrs):
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), list(outputs), **attrs)],
        "pool",
        [helper.make_tensor_value_info("x", F, x_shape)],
        [
            helper.make_tensor_value_info(name, TensorProto.INT64 if name == "i" else F, None)
            for name in outputs
        ],
        [numpy_helper.from_array(v, name) for name, v in (initializers or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _instruction_kinds(model, backend) -> Counter[str]:
    stages = compile_stages(load_onnx(model), backend, verify_each=True)
    assert stages.ir is not None
    return Counter(i.kind for i in stages.ir.compute_instrs())


def _check_kept(
    model, kinds: tuple[str, ...], feeds: dict[str, np.ndarray], oracle=onnxruntime_outputs
) -> None:
    """Kept: one instruction of each kind; kept or lowered, every output matches the oracle
    (exactly for integer outputs)."""
    keeping = InterpreterBackend(keep=kinds)
    got_kinds = _instruction_kinds(model, keeping)
    assert all(got_kinds[kind] == 1 for kind in kinds), got_kinds
    assert not set(kinds) & set(_instruction_kinds(model, InterpreterBackend()))
    expected = oracle(model, feeds)
    for backend in (keeping, InterpreterBackend()):
        got = glow_core.compile(model, backend=backend).run(feeds)
        for name, want in expected.items():
            assert got[name].shape == want.shape, (name, backend.keep)
            if want.dtype.kind == "f":
                assert relative_error(got[name], want) <= 1e-5, (name, backend.keep)
            else:
                np.testing.assert_array_equal(got[name], want)


POOLS = [
    (
        "MaxPool",
        "MaxPoolNd",
        (2, 3, 7, 8),
        dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
    ),
    (
        "MaxPool",
        "MaxPoolNd",
        (1, 2, 5, 6, 7),
        dict(kernel_shape=[2, 2, 3], dilations=[2, 1, 1], pads=[1, 0, 2, 0, 1, 1]),
    ),
    ("MaxPool", "MaxPoolNd", (2, 3, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="SAME_LOWER")),
    (
        "AveragePool",
        "AvgPoolNd",
        (2, 2, 7, 6),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 0], ceil_mode=1, count_include_pad=1),
    ),
    ("AveragePool", "AvgPoolNd", (1, 3, 11), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    (
        "AveragePool",
        "AvgPoolNd",
        (1, 2, 4, 5, 6),
        dict(kernel_shape=[2, 3, 2], dilations=[1, 2, 1], pads=[1, 2, 0, 0, 1, 1], ceil_mode=1),
    ),
    (
        "AveragePool",
        "AvgPoolNd",
        (1, 2, 9, 7),
        dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
    ),
    ("LpPool", "LpPool", (2, 2, 6, 5), dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1], p=3)),
    ("GlobalMaxPool", "GlobalMaxPool", (2, 3, 4, 5, 2), {}),
    ("GlobalAveragePool", "GlobalAveragePool", (2, 3, 9), {}),
]


@pytest.mark.parametrize(("op", "kind", "shape", "attrs"), POOLS)
def test_a_kept_pool_is_one_instruction_and_matches_onnxruntime(op, kind, shape, attrs, rng) -> None:
    """Every window attribute (pads per side, ceil_mode, dilations, auto_pad, count_include_pad,
    p) reaches the kept node, and its lowering agrees."""
    model = _model(op, shape, **attrs)
    _check_kept(model, (kind,), {"x": rng.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices_are_a_second_kept_node(storage_order, rng) -> None:
    """MaxPool asked for its Indices: MaxPoolNd for the values, MaxPoolIndices for the flat
    positions (row- or column-major spatial dims), both kept, both equal to onnxruntime's."""
    shape = (2, 3, 6, 7)
    model = _model(
        "MaxPool",
        shape,
        ("y", "i"),
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        storage_order=storage_order,
    )
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    _check_kept(model, ("MaxPoolNd", "MaxPoolIndices"), feeds)


def test_a_kept_max_unpool_is_one_instruction_and_matches_onnxruntime(rng) -> None:
    """MaxUnpool scattered into the unpooled shape, then padded up to output_shape, as the
    ONNX reference does (onnxruntime indexes the padded output instead)."""
    x = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    positions = np.stack([rng.permutation(7 * 9)[:12] for _ in range(6)]).reshape(2, 3, 3, 4)
    base = (np.arange(6) * 7 * 9).reshape(2, 3, 1, 1)
    initializers = {"i": (positions + base).astype(np.int64), "shape": np.array([2, 3, 8, 10], np.int64)}
    model = _model(
        "MaxUnpool",
        x.shape,
        inputs=("x", "i", "shape"),
        initializers=initializers,
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[0, 0, 0, 0],
    )
    _check_kept(model, ("MaxUnpool",), {"x": x}, oracle=_onnx_reference)


def _onnx_reference(model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip(["y"], ReferenceEvaluator(model).run(None, feeds), strict=True))


@pytest.mark.parametrize(
    ("op", "shape", "attrs", "lowered"),
    [
        (
            "MaxPool",
            (1, 3, 9, 9),
            dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
            {"MaxPool": 1},
        ),
        ("MaxPool", (1, 3, 8, 9), dict(kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1), {"MaxPool": 1}),
        ("AveragePool", (1, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), {"AvgPool": 1}),
        (
            "AveragePool",
            (1, 3, 8, 8),
            dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
            {"Pad": 1, "AvgPool": 1},
        ),
    ],
)
def test_two_d_pools_lower_to_one_window_primitive(op, shape, attrs, lowered) -> None:
    """A CNN's pools compile to the 2-D primitive alone (no window gathering), so lowering
    the pooling nodes adds no instruction to ResNet-50 or MobileNetV2."""
    assert _instruction_kinds(_model(op, shape, **attrs), InterpreterBackend()) == Counter(lowered)


def test_a_pool_with_pads_as_wide_as_its_window_is_refused_with_the_node_named() -> None:
    """A window wholly in padding has no element: refused at load, naming the node and why."""
    with pytest.raises(glow_core.GlowError, match=r"pads .* smaller than the window"):
        load_onnx(_model("MaxPool", (1, 1, 5, 5), kernel_shape=[2, 2], pads=[2, 0, 0, 0]))
