"""ONNX frontend tests, part 2: load-time values (constants, shapes, casts, folding) and the
errors the loader reports. The helpers are those of ``test_onnx_loader``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import check, kinds, model_of, normal, one

from glow_core.errors import GlowError, InputError, ModelLoadError, ShapeError, UnsupportedOpError
from glow_core.frontends.onnx import SUPPORTED_OPS, LoadTimeValueError, load_onnx
from glow_core.lowering.evaluate import evaluate

# ---- constants, shapes, casts and folding --------------------------------------------------


@pytest.mark.parametrize(
    "attr",
    [
        {"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)},
        {"value_float": 1.5},
        {"value_floats": [0.5, -1.0, 2.0]},
    ],
)
def test_constant_float_forms(rng, attr) -> None:
    x = normal(rng, 2, 3)
    nodes = [helper.make_node("Constant", [], ["c"], **attr), helper.make_node("Add", ["x", "c"], ["y"])]
    check(model_of(nodes, {"x": x}), {"x": x})


@pytest.mark.parametrize("attr", [{"value_int": 7}, {"value_ints": [3, -4]}])
def test_constant_int_forms_as_outputs(attr) -> None:
    model = model_of([helper.make_node("Constant", [], ["y"], **attr)], {}, outputs={"y": TensorProto.INT64})
    module = check(model, {})
    assert kinds(module) == ["Save"]


@pytest.mark.parametrize(("start", "end"), [(None, None), (1, None), (-2, -1), (0, 10)])
def test_shape_is_a_load_time_value(rng, start, end) -> None:
    x = normal(rng, 2, 3, 4)
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    model = one("Shape", ["x"], {"x": x}, outputs={"y": TensorProto.INT64}, **attrs)
    check(model, {"x": x})


@pytest.mark.parametrize(("to", "dtype"), [(TensorProto.INT32, np.int32), (TensorProto.FLOAT16, np.float16)])
def test_cast_at_run_time(rng, to: int, dtype) -> None:
    x = normal(rng, 3, 5) * 4
    module = check(one("Cast", ["x"], {"x": x}, outputs={"y": to}, to=to), {"x": x}, tol=1e-3)
    assert "Convert" in kinds(module)
    feeds = {"i": rng.integers(-9, 9, (4,)).astype(np.int64)}
    check(one("Cast", ["i"], feeds, to=TensorProto.FLOAT), feeds)


def test_cast_of_constant_is_folded(rng) -> None:
    x = normal(rng, 4)
    nodes = [
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "cf"], ["y"]),
    ]
    module = check(model_of(nodes, {"x": x}, inits={"c": np.array([1, -2, 3, 4], np.int64)}), {"x": x})
    assert "Convert" not in kinds(module)


def test_cast_to_double_is_supported(rng) -> None:
    x = normal(rng, 3)
    module = load_onnx(one("Cast", ["x"], {"x": x}, outputs={"y": TensorProto.DOUBLE}, to=TensorProto.DOUBLE))
    assert module.placeholders["y"].type.elem.name == "float64"


def test_cast_to_an_element_type_glow_lacks_is_refused(rng) -> None:
    x = normal(rng, 3)
    with pytest.raises(UnsupportedOpError, match=r"cast_node.*cast target has element type STRING"):
        load_onnx(one("Cast", ["x"], {"x": x}, outputs={"y": TensorProto.STRING}, to=TensorProto.STRING))


def test_constant_of_shape_range_where_fold(rng) -> None:
    x = normal(rng, 2, 5)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node(
            "ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.array([2.0], np.float32))
        ),
        helper.make_node("Range", ["zero", "five", "one"], ["r"]),
        helper.make_node("Equal", ["r", "two"], ["is_two"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Where", ["is_two", "ones", "rf"], ["w"]),
        helper.make_node("Mul", ["x", "w"], ["y"]),
    ]
    inits = {k: np.array(v, np.int64) for k, v in (("zero", 0), ("five", 5), ("one", 1), ("two", 2))}
    module = check(model_of(nodes, {"x": x}, inits=inits), {"x": x}, engines=("ort", "ref"))
    assert kinds(module) == ["Mul", "Save"]


def test_shape_subgraph_folds_away(rng) -> None:
    """The PyTorch flatten idiom: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))."""
    x = normal(rng, 2, 3, 4)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Mul", ["batch1", "one"], ["batch2"]),
        helper.make_node("Concat", ["batch2", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = {
        "zero": np.array(0, np.int64),
        "axes": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "minus_one": np.array([-1], np.int64),
    }
    module = check(model_of(nodes, {"x": x}, inits=inits), {"x": x})
    assert kinds(module) == ["Reshape", "Save"]
    assert module.constants == {}


def test_fold_only_op_on_runtime_input_is_refused(rng) -> None:
    """Range's result shape depends on its inputs' values: they must be known at load time."""
    feeds = {"n": np.array(5, np.int64)}
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    model = one("Range", ["zero", "n", "one"], feeds, outputs={"y": TensorProto.INT64}, inits=inits)
    with pytest.raises(LoadTimeValueError, match=r"range_node.*input 1 .*tensor 'n'.*static_inputs") as info:
        load_onnx(model)
    assert info.value.inputs == ("n",)
    module = load_onnx(model, static_inputs=feeds)
    np.testing.assert_array_equal(evaluate(module, {})["y"], np.arange(5))


# ---- errors ----------------------------------------------------------------------------------


def test_unknown_op_is_reported_before_building(rng) -> None:
    x = normal(rng, 3)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="n1"),
        helper.make_node("Foo", ["r"], ["y"], name="n3"),
    ]
    with pytest.raises(UnsupportedOpError) as info:
        load_onnx(model_of(nodes, {"x": x}))
    assert str(info.value) == (
        "ONNX op 'Foo' (node 'n3', domain '', opset 17) is not supported by glow; "
        "supported ops: see glow_core.frontends.onnx.SUPPORTED_OPS"
    )


def test_non_default_domain_is_refused(rng) -> None:
    x = normal(rng, 3)
    node = helper.make_node("Relu", ["x"], ["y"], name="ms", domain="com.microsoft")
    model = model_of([node], {"x": x})
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOpError, match=r"'Relu' \(node 'ms', domain 'com.microsoft', opset 1\)"):
        load_onnx(model)


def test_truncated_file_names_path(tmp_path, rng) -> None:
    x = normal(rng, 2, 3)
    data = one("Gemm", ["x", "w"], {"x": x}, inits={"w": normal(rng, 3, 64)}).SerializeToString()
    path = tmp_path / "model.onnx"
    for cut in (len(data) // 2, len(data) - 3, 7):
        path.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError, match=r"model\.onnx.*re-export") as info:
            load_onnx(path)
        assert "\n" not in str(info.value)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_onnx(tmp_path / "missing.onnx")
    with pytest.raises(ModelLoadError, match="bytes"):
        load_onnx(b"\xff\xff not a model")


def test_load_from_path_and_bytes(tmp_path, rng) -> None:
    x = normal(rng, 2, 3)
    model = one("Relu", ["x"], {"x": x})
    path = tmp_path / "relu.onnx"
    onnx.save(model, path)
    for source in (path, str(path), model.SerializeToString(), model):
        module = load_onnx(source)
        assert list(module.functions) == ["main"]
        assert [p.name for p in module.function.inputs] == ["x"]
        assert [p.name for p in module.function.outputs] == ["y"]
        np.testing.assert_array_equal(evaluate(module, {"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize(
    ("op", "ins", "what"), [("Reshape", ["x", "s"], "shape"), ("Slice", ["x", "s", "s"], "starts")]
)
def test_runtime_value_where_constant_needed(rng, op: str, ins, what: str) -> None:
    feeds = {"x": normal(rng, 2, 3), "s": np.array([3, 2], np.int64)}
    with pytest.raises(
        UnsupportedOpError, match=rf"{op.lower()}_node.*input 1 \({what}, tensor 's'\).*constant"
    ):
        load_onnx(one(op, ins, feeds))


@pytest.mark.parametrize(("op", "b_shape"), [("Add", (4, 5)), ("MatMul", (4, 5)), ("Conv", (2, 5, 1, 1))])
def test_shape_errors_name_the_onnx_node(rng, op: str, b_shape) -> None:
    a_shape = (1, 3, 4, 4) if op == "Conv" else (2, 3)
    feeds = {"a": normal(rng, *a_shape), "b": normal(rng, *b_shape)}
    with pytest.raises(ShapeError, match=rf"ONNX node '{op.lower()}_node' \({op}\)"):
        load_onnx(one(op, ["a", "b"], feeds))


def test_old_opset_is_upgraded_or_refused(rng) -> None:
    """Opsets older than 7 go through onnx's version converter; what it cannot convert is refused."""
    x = normal(rng, 3)
    module = load_onnx(one("Relu", ["x"], {"x": x}, opset=6))
    np.testing.assert_array_equal(evaluate(module, {"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(ModelLoadError, match=r"opset 6.*version converter could not upgrade"):
        load_onnx(one("Foo", ["x"], {"x": x}, opset=6))


def _symbolic_model(dims: list) -> onnx.ModelProto:
    model = one("Relu", ["x"], {"x": np.zeros((1, 1), np.float32)})
    shape = model.graph.input[0].type.tensor_type.shape
    for dim, value in zip(shape.dim, dims, strict=True):
        dim.Clear()
        if isinstance(value, str):
            dim.dim_param = value
        else:
            dim.dim_value = value
    return model


def test_symbolic_dims(rng) -> None:
    module = load_onnx(_symbolic_model(["N", 4]))
    assert module.placeholders["x"].type.shape == (1, 4)
    with pytest.raises(ModelLoadError, match=r"input 'x' dimension 1 is symbolic \('L'\).*input_shapes"):
        load_onnx(_symbolic_model(["N", "L"]))
    x = normal(rng, 3, 5)
    module = load_onnx(_symbolic_model(["N", "L"]), input_shapes={"x": (3, 5)})
    np.testing.assert_array_equal(evaluate(module, {"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(InputError, match="not model inputs"):
        load_onnx(_symbolic_model(["N", 4]), input_shapes={"z": (1, 4)})
    with pytest.raises(InputError, match="rank 3"):
        load_onnx(_symbolic_model(["N", 4]), input_shapes={"x": (1, 4, 1)})


def test_unsupported_input_dtype(rng) -> None:
    with pytest.raises(GlowError, match="input 'x' has element type COMPLEX64"):
        load_onnx(one("Relu", ["x"], {"x": np.ones(3, np.complex64)}, outputs={"y": TensorProto.COMPLEX64}))


def test_supported_ops_is_the_importer_table() -> None:
    assert isinstance(SUPPORTED_OPS, frozenset)
    for op in ("Conv", "Gemm", "MatMul", "Softmax", "Split", "Slice", "Shape", "Cast", "Range", "Where"):
        assert op in SUPPORTED_OPS
    assert "Foo" not in SUPPORTED_OPS


def test_initializer_dtypes_are_kept(rng) -> None:
    feeds = {"i": np.array([2, 0], np.int64)}
    inits = {"t": np.arange(6, dtype=np.int32)}
    module = check(one("Gather", ["t", "i"], feeds, outputs={"y": TensorProto.INT32}, inits=inits), feeds)
    assert [c.type.elem.name for c in module.constants.values()] == ["int32"]


def test_conv_with_a_filter_of_another_element_kind_is_refused_at_import(rng) -> None:
    """A float64 filter on a float32 input is an invalid model: the error names both types
    at the Conv node, not at some Add deep in its lowering."""
    x = normal(rng, 1, 3, 8, 8)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    model = model_of(nodes, {"x": x}, inits={"w": rng.standard_normal((4, 3, 3, 3))})
    with pytest.raises(ShapeError, match=r"Conv.*same element kind.*f32<1x3x8x8> vs f64<4x3x3x3>"):
        load_onnx(model)
