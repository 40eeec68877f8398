"""ONNX coverage (issue 8), part 1: comparisons, logic, activations, reductions, indexing.

Every test builds a one-node (or tiny) model, loads it with ``load_onnx``, evaluates the glow
graph with the primitives' references, and compares with onnxruntime (``ort``) or
``onnx.reference`` (``ref``, for opsets or attributes onnxruntime lacks) on seeded random
inputs, with the harness in ``onnx_cases`` that every ONNX test module shares.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from onnx import helper
from onnx_cases import I64, B, F, check, ints, model_of, normal, one

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import SUPPORTED_OPS
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type

# ---- new primitives: type rules ------------------------------------------------------------------


def test_new_primitive_type_rules() -> None:
    f = Type((2, 3))
    assert PRIMITIVES["Compare"].infer_type([f, f], {"predicate": "lt"}) == Type((2, 3), ElemKind.bool)
    assert PRIMITIVES["Select"].infer_type([f.with_elem(ElemKind.bool), f, f], {}) == f
    argmax = PRIMITIVES["ArgMax"].infer_type([f], {"axis": -1, "select_last": False})
    assert argmax == Type((2, 1), ElemKind.int64)
    topk = PRIMITIVES["TopK"].infer_type([f], {"k": 2, "axis": 1, "largest": True})
    assert topk == Type((2, 2), ElemKind.int64)
    scatter = PRIMITIVES["ScatterElements"]
    idx = Type((1, 3), ElemKind.int64)
    assert scatter.infer_type([f, idx, Type((1, 3))], {"axis": 0, "reduction": "add"}) == f
    assert (
        PRIMITIVES["CumReduce"].infer_type(
            [f], {"axis": 1, "op": "prod", "exclusive": False, "reverse": True}
        )
        == f
    )


@pytest.mark.parametrize(
    ("name", "types", "attrs", "message"),
    [
        ("Compare", ["f32[2]", "f32[3]"], {"predicate": "eq"}, "same type"),
        ("Compare", ["f32[2]", "f32[2]"], {"predicate": "gt"}, "predicate"),
        ("Select", ["f32[2]", "f32[2]", "f32[2]"], {}, "condition must be bool"),
        ("Select", ["bool[3]", "f32[2]", "f32[2]"], {}, "differ in shape"),
        ("TopK", ["f32[2,3]"], {"k": 4, "axis": 1, "largest": True}, "out of range"),
        (
            "ScatterElements",
            ["f32[2,3]", "f32[1,3]", "f32[1,3]"],
            {"axis": 0, "reduction": "none"},
            "int32 or int64",
        ),
        (
            "ScatterElements",
            ["f32[2,3]", "i64[1,3]", "f32[1,3]"],
            {"axis": 0, "reduction": "or"},
            "reduction",
        ),
        ("CumReduce", ["f32[2,3]"], {"axis": 0, "op": "max", "exclusive": False, "reverse": False}, "op"),
    ],
)
def test_new_primitive_type_errors(name: str, types: list[str], attrs: dict, message: str) -> None:
    spec = PRIMITIVES[name]
    with pytest.raises(ShapeError, match=message):
        spec.infer_type([Type.parse(t) for t in types], spec.complete_attrs(attrs))


# ---- comparisons, logic, selection, rounding -----------------------------------------------------


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_comparisons_broadcast(rng, op: str, dtype) -> None:
    a = ints(rng, -3, 3, 3, 4, dtype=dtype)
    b = ints(rng, -3, 3, 4, dtype=dtype)
    check(one(op, ["a", "b"], {"a": a, "b": b}, outputs={"y": B}), {"a": a, "b": b})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(rng, op: str) -> None:
    a, b = rng.random((2, 3, 4)) < 0.5, rng.random((3, 1)) < 0.5
    check(one(op, ["a", "b"], {"a": a, "b": b}, outputs={"y": B}), {"a": a, "b": b})


def test_not_where_isnan_isinf(rng) -> None:
    x = normal(rng, 3, 5)
    x[0, 1], x[1, 2], x[2, 3] = np.nan, np.inf, -np.inf
    c = rng.random((3, 5)) < 0.5
    nodes = [
        helper.make_node("Not", ["c"], ["n"]),
        helper.make_node("IsNaN", ["x"], ["isnan"]),
        helper.make_node("IsInf", ["x"], ["isinf"]),
        helper.make_node("IsInf", ["x"], ["ispos"], detect_negative=0),
        helper.make_node("Where", ["n", "x", "zero"], ["y"]),
    ]
    outputs = {"isnan": B, "isinf": B, "ispos": B, "y": F}
    inits = {"zero": np.zeros(5, np.float32)}
    check(model_of(nodes, {"x": x, "c": c}, outputs, inits), {"x": x, "c": c})


@pytest.mark.parametrize("op", ["Floor", "Ceil", "Round", "Sign"])
def test_rounding(rng, op: str) -> None:
    x = (ints(rng, -12, 12, 4, 6).astype(np.float32) / 4).astype(np.float32)  # exact halves: ties
    x[0, :3] = [0.5, 1.5, -2.5]
    check(one(op, ["x"], {"x": x}), {"x": x})


@pytest.mark.parametrize(("fmod", "dtype"), [(0, np.int64), (0, np.int32), (1, np.int64), (1, np.float32)])
def test_mod(rng, fmod: int, dtype) -> None:
    a = ints(rng, -20, 20, 3, 4, dtype=dtype)
    b = ints(rng, 1, 6, 3, 4, dtype=dtype) * np.where(rng.random((3, 4)) < 0.5, -1, 1).astype(dtype)
    out = {"y": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))}
    check(one("Mod", ["a", "b"], {"a": a, "b": b}, fmod=fmod, outputs=out), {"a": a, "b": b})


# ---- activations and math functions ---------------------------------------------------------------

ACTIVATIONS = [
    ("Elu", {"alpha": 0.7}, 17),
    ("Selu", {}, 17),
    ("Celu", {"alpha": 1.3}, 17),
    ("ThresholdedRelu", {"alpha": 0.4}, 17),
    ("Softplus", {}, 17),
    ("Softsign", {}, 17),
    ("Mish", {}, 18),
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
    ("Shrink", {"lambd": 0.6, "bias": 0.2}, 17),
    ("Sin", {}, 17),
    ("Cos", {}, 17),
    ("Tan", {}, 17),
    ("Atan", {}, 17),
    ("Sinh", {}, 17),
    ("Cosh", {}, 17),
    ("Asinh", {}, 17),
]


@pytest.mark.parametrize(("op", "attrs", "opset"), ACTIVATIONS)
def test_activations(rng, op: str, attrs: dict, opset: int) -> None:
    x = normal(rng, 3, 7) * 3
    check(one(op, ["x"], {"x": x}, opset=opset, **attrs), {"x": x})


@pytest.mark.parametrize("op", ["Asin", "Acos", "Atanh"])
def test_inverse_trig_in_domain(rng, op: str) -> None:
    x = rng.uniform(-0.95, 0.95, (4, 5)).astype(np.float32)
    check(one(op, ["x"], {"x": x}), {"x": x})


def test_acosh_and_swish(rng) -> None:
    x = rng.uniform(1.0, 5.0, (4, 5)).astype(np.float32)
    check(one("Acosh", ["x"], {"x": x}), {"x": x})
    x = normal(rng, 4, 5)
    check(one("Swish", ["x"], {"x": x}, alpha=1.5, opset=24), {"x": x}, engines=("ref",))


def test_prelu_broadcast_slope(rng) -> None:
    x, slope = normal(rng, 2, 3, 4, 4), normal(rng, 3, 1, 1)
    check(one("PRelu", ["x", "s"], {"x": x}, inits={"s": slope}), {"x": x})


@pytest.mark.parametrize("op", ["LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("opset", "axis"), [(11, 1), (11, -1), (13, 1), (13, -1)])
def test_softmax_family(rng, op: str, opset: int, axis: int) -> None:
    x = normal(rng, 2, 3, 5)
    if op == "Hardmax":
        x[0, 0, :2] = 9.0  # a tie: the first maximum wins
    check(one(op, ["x"], {"x": x}, axis=axis, opset=opset), {"x": x})


# ---- reductions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceProd", "ReduceMin"],
)
@pytest.mark.parametrize(("axes", "keepdims"), [([1], 1), ([0, 2], 0), (None, 1)])
def test_reductions(rng, op: str, axes, keepdims: int) -> None:
    x = np.abs(normal(rng, 3, 4, 5)) + 0.5
    kw = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    check(one(op, ["x"], {"x": x}, opset=17, **kw), {"x": x})


def test_reduction_axes_input_opset18_and_empty_set(rng) -> None:
    x = normal(rng, 2, 3, 4)
    axes = np.array([-1], np.int64)
    check(one("ReduceMax", ["x", "axes"], {"x": x}, inits={"axes": axes}, opset=18), {"x": x})
    empty = np.zeros((2, 0, 4), np.float32)
    zero_axes = np.array([1], np.int64)
    for op in ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceLogSumExp"):
        model = one(op, ["x", "axes"], {"x": empty}, inits={"axes": zero_axes}, opset=18, keepdims=0)
        check(model, {"x": empty}, engines=("ref",))


def test_bool_reduce_max_min_are_any_all(rng) -> None:
    x = rng.random((3, 4)) < 0.3
    for op in ("ReduceMax", "ReduceMin"):
        model = one(
            op, ["x", "axes"], {"x": x}, inits={"axes": np.array([1], np.int64)}, opset=20, outputs={"y": B}
        )
        check(model, {"x": x}, engines=("ref",))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(("axis", "keepdims", "last"), [(0, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_arg_extremes(rng, op: str, axis: int, keepdims: int, last: int) -> None:
    x = ints(rng, -2, 2, 3, 4, 5).astype(np.float32)  # many ties
    kw = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    check(one(op, ["x"], {"x": x}, outputs={"y": I64}, **kw), {"x": x})


def test_support_doc_lists_exactly_the_supported_ops() -> None:
    """docs/onnx-support.md's op list is generated from SUPPORTED_OPS; keep the two equal."""
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "onnx-support.md").read_text()
    section = doc.split("<!-- supported-ops:start -->")[1].split("<!-- supported-ops:end -->")[0]
    assert set(re.findall(r"`(\w+)`", section)) == set(SUPPORTED_OPS)
    assert f"{len(SUPPORTED_OPS)} op types" in section
