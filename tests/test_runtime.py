"""compile() and CompiledFunction.run: model forms accepted, bad inputs refused up front."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import glow_core
from glow_core.errors import GlowError, InputError, UnsupportedOpError
from glow_core.graph import Module
from glow_core.model_zoo import mlp, random_inputs
from glow_core.runtime.pipeline import check_support


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return mlp(batch=2, seed=3)


def _oracle(model, inputs):
    from glow_core.accuracy import onnxruntime_outputs

    return onnxruntime_outputs(model, inputs)["output"]


@pytest.mark.parametrize("form", ["proto", "path", "bytes", "module"])
def test_compile_accepts_every_model_form(form, model, tmp_path, registry, rng):
    if form == "path":
        path = tmp_path / "mlp.onnx"
        onnx.save(model, str(path))
        source = str(path)
    elif form == "bytes":
        source = model.SerializeToString()
    elif form == "module":
        from glow_core.frontends.onnx import load_onnx

        source = load_onnx(model)
    else:
        source = model
    compiled = glow_core.compile(source)
    inputs = random_inputs(model, seed=int(rng.integers(1 << 30)))
    got = compiled.run(inputs)["output"]
    np.testing.assert_allclose(got, _oracle(model, inputs), rtol=1e-4, atol=1e-6)


def test_compiling_a_module_leaves_it_unchanged(registry, rng):
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    b.save(b.relu(b.placeholder("x", (3,))), "y")
    before = [n.kind for n in fn.nodes]
    glow_core.compile(m)
    assert [n.kind for n in fn.nodes] == before


@pytest.fixture(scope="module")
def compiled(model):
    import glow_interpreter.plugin

    from glow_core import plugins

    reg = plugins.BackendRegistry()
    reg.register(glow_interpreter.plugin, "interpreter")
    return glow_core.compile(model, backend=reg.get("interpreter"))


def test_wrong_input_name_is_refused(compiled):
    with pytest.raises(InputError, match=r"unknown \['inptu'\], missing \['input'\]"):
        compiled.run({"inptu": np.zeros((2, 784), np.float32)})


def test_wrong_dtype_is_refused_with_the_fix(compiled):
    with pytest.raises(InputError, match=r"dtype float64, expected float32.*astype\(np.float32\)"):
        compiled.run({"input": np.ones((2, 784))})


def test_wrong_shape_is_refused(compiled):
    with pytest.raises(InputError, match=r"shape \(1, 784\), expected \(2, 784\)"):
        compiled.run({"input": np.ones((1, 784), np.float32)})


def test_non_array_input_is_refused(compiled):
    with pytest.raises(InputError, match="must be a numpy array"):
        compiled.run({"input": [[1.0] * 784] * 2})


def test_input_shapes_override_the_batch(model, registry, rng):
    compiled = glow_core.compile(model, input_shapes={"input": [5, 784]})
    assert compiled.input_types["input"].shape == (5, 784)
    assert compiled.output_types["output"].shape == (5, 10)


def test_unsupported_nodes_are_refused_at_compile_time(registry):
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (3,), glow_core.ElemKind.int32)
    b.save(b.Erf(b.Convert(x, elem="float32")), "y")
    backend = registry.get("interpreter")
    check_support(fn, backend)  # all supported

    class NoErf(type(backend)):
        def is_op_supported(self, node):
            return node.kind != "Erf" and super().is_op_supported(node)

    with pytest.raises(UnsupportedOpError, match=r"cannot run 1 node\(s\): Erf\[float32\]"):
        glow_core.compile(m, backend=NoErf())


def test_glow_error_is_the_base_of_everything():
    for cls in (InputError, UnsupportedOpError):
        assert issubclass(cls, GlowError)


def test_support_of_fixed_result_kind_operators_is_keyed_by_their_operand(registry):
    from glow_core.backend import BackendInfo

    backend = registry.get("interpreter")

    class ArgMaxOnFloats(type(backend)):
        def info(self) -> BackendInfo:
            return super().info().model_copy(update={"supports": {"ArgMax": ["float32"]}})

    m = Module()
    fn = m.create_function()
    b = fn.builder()
    node = b.ArgMax(b.placeholder("x", (4, 5)), axis=1)
    b.save(node, "y")
    assert node.type.elem.name == "int64"
    assert ArgMaxOnFloats().is_op_supported(node)


def test_an_input_only_its_shape_is_read_from_is_still_accepted(registry, rng):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = glow_core.compile(model)
    assert list(compiled.input_types) == ["x"]
    out = compiled.run({"x": rng.standard_normal((2, 3)).astype(np.float32)})
    np.testing.assert_array_equal(out["y"], [2, 3])
