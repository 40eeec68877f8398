"""Malformed and hostile ONNX models (issue 22, parts 3, 4 and 7): every one is refused with a
GlowError naming the tensor or node, before any large allocation; external data is read only
from an explicit folder. Each case here raised a raw exception, was accepted, or allocated
without bound before the loader's validation and the memory budgets."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_cases import check, model_of, normal, one

import glow_core
from glow_core.cli import main
from glow_core.errors import GlowError, InputError, MemoryLimitError, ModelLoadError, ShapeError
from glow_core.frontends.onnx import load_onnx
from glow_core.limits import ARENA_ENV, TENSOR_ENV, MemoryLimits, memory_limits, parse_bytes
from glow_core.lowering.evaluate import evaluate

MiB = 1 << 20


def _no_big_allocation(action, limit: int = 64 * MiB) -> str:
    """Run ``action`` (which must raise MemoryLimitError) and check the Python heap's peak
    stayed under ``limit``: the refusal came before the allocation, not after it failed."""
    tracemalloc.start()
    try:
        with pytest.raises(MemoryLimitError) as info:
            action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, peak
    message = str(info.value)
    assert "budget" in message and (TENSOR_ENV in message or ARENA_ENV in message)
    return message


# ---- part 3: memory bombs ---------------------------------------------------------------------


def _constant_of_shape(dims: list[int]) -> onnx.ModelProto:
    value = numpy_helper.from_array(np.array([1.0], np.float32))
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="bomb", value=value)
    return model_of([node], {}, inits={"s": np.array(dims, np.int64)})


@pytest.mark.parametrize(
    ("dims", "limits"),
    [
        ([2**30], MemoryLimits(max_tensor_bytes=256 * MiB)),  # 4 GiB: the 21 GB run
        ([2**40], None),  # 4 TiB under the default budget
        ([2**32, 2**32, 2**32], None),  # 2**96 elements: int64 arithmetic would wrap around
    ],
)
def test_constant_of_shape_bomb_is_refused_before_folding(dims, limits) -> None:
    message = _no_big_allocation(lambda: load_onnx(_constant_of_shape(dims), limits=limits))
    assert "'bomb' (ConstantOfShape)" in message
    assert f"[{'x'.join(map(str, dims))}]" in message


def test_compile_takes_the_budget_and_the_cli_names_it(tmp_path, registry, capsys) -> None:
    with pytest.raises(MemoryLimitError, match="bomb"):
        glow_core.compile(_constant_of_shape([2**20]), limits=MemoryLimits(max_tensor_bytes=MiB))
    path = tmp_path / "bomb.onnx"
    onnx.save(_constant_of_shape([2**40]), path)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "4.00 TiB" in err and TENSOR_ENV in err


@pytest.mark.parametrize(
    ("op", "extra", "value"),
    [
        ("Expand", "s", np.array([2**20, 2**20, 3], np.int64)),
        ("Tile", "r", np.array([2**31, 2**31], np.int64)),
        ("Pad", "p", np.array([0, 2**31 - 1, 0, 2**31 - 1], np.int64)),
    ],
)
@pytest.mark.parametrize("x_known", [False, True], ids=["runtime-x", "folded-x"])
def test_huge_results_are_refused_naming_the_node(rng, op, extra, value, x_known) -> None:
    """On a run-time input the node's type is refused; on a constant, the load-time fold."""
    x = normal(rng, 1, 3) if op == "Expand" else normal(rng, 2, 3)
    feeds, inits = ({}, {"x": x, extra: value}) if x_known else ({"x": x}, {extra: value})
    model = one(op, ["x", extra], feeds, inits=inits)
    message = _no_big_allocation(lambda: load_onnx(model))
    assert f"'{op.lower()}_node' ({op})" in message


def test_huge_declared_input_is_refused(registry) -> None:
    model = one("Relu", ["x"], {"x": np.ones(1, np.float32)})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2**40
    message = _no_big_allocation(lambda: glow_core.compile(model))
    assert "input 'x'" in message and "[1099511627776]" in message
    with pytest.raises(MemoryLimitError, match="input 'x'"):
        load_onnx(one("Relu", ["x"], {"x": np.ones(1, np.float32)}), input_shapes={"x": [2**40]})


def test_memory_plan_over_the_arena_budget_is_refused(rng, registry) -> None:
    x = normal(rng, 64, 64)
    model = model_of(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])], {"x": x}
    )
    with pytest.raises(MemoryLimitError, match=r"memory plan of function .main. needs 64.00 KiB") as info:
        glow_core.compile(model, limits=MemoryLimits(max_arena_bytes=40 * 1024))
    assert ARENA_ENV in str(info.value)
    compiled = glow_core.compile(model, limits=MemoryLimits(max_arena_bytes=64 * 1024))
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], -np.maximum(x, 0))


def test_budget_from_the_environment(monkeypatch, rng) -> None:
    model = one("Relu", ["x"], {"x": normal(rng, 32, 32)})  # a 4 KiB input
    monkeypatch.setenv(TENSOR_ENV, "2KiB")
    with pytest.raises(MemoryLimitError, match=r"input 'x' .* 4.00 KiB .* budget of 2.00 KiB"):
        load_onnx(model)
    with memory_limits(MemoryLimits(max_tensor_bytes=8 * 1024)):  # a block overrides it
        assert "x" in load_onnx(model).placeholders
    monkeypatch.setenv(TENSOR_ENV, "lots")
    with pytest.raises(GlowError, match=f"{TENSOR_ENV} = 'lots' is not a size"):
        load_onnx(model)
    assert parse_bytes("1.5GiB", "x") == 3 << 29 and parse_bytes("4096", "x") == 4096


# ---- part 4: malformed tensors, attributes and graphs ---------------------------------------------


def _with_initializer(rng, edit) -> onnx.ModelProto:
    tensor = numpy_helper.from_array(normal(rng, 2, 3), "w")
    edit(tensor)
    model = one("Add", ["x", "w"], {"x": normal(rng, 2, 3)})
    model.graph.initializer.append(tensor)
    return model


def _short_raw(t):
    t.raw_data = t.raw_data[:-4]


def _typed_too_long(t):
    t.ClearField("raw_data")
    t.float_data.extend([1.0] * 7)


def _negative_dim(t):
    t.dims[0] = -1


def _set(field, value):
    return lambda t: setattr(t, field, value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_short_raw, r"'w' has 20 raw_data bytes, but its dims \[2, 3\] need 24"),
        (lambda t: t.ClearField("raw_data"), r"'w' has no data, but its dims \[2, 3\] need 6 float_data"),
        (_typed_too_long, r"'w' has 7 float_data, but its dims \[2, 3\] need 6"),
        (_set("data_type", 77), r"'w': data_type 77 \(\?\) is not an ONNX element type"),
        (_set("data_type", 0), r"'w': data_type 0 \(UNDEFINED\) is not an ONNX element type"),
        (_negative_dim, r"'w': dims \[-1, 3\] include a negative dimension"),
    ],
    ids=["short-raw-data", "no-data", "typed-too-long", "data-type-77", "data-type-0", "negative-dim"],
)
def test_malformed_initializer_is_named(rng, edit, message) -> None:
    with pytest.raises(ModelLoadError, match=rf"initializer {message}"):
        load_onnx(_with_initializer(rng, edit))


def test_malformed_attribute_tensor_is_named() -> None:
    value = numpy_helper.from_array(np.ones(4, np.float32))
    value.raw_data = value.raw_data[:3]
    model = model_of([helper.make_node("Constant", [], ["y"], name="k", value=value)], {})
    with pytest.raises(ModelLoadError, match=r"node 'k' attribute 'value' has 3 raw_data bytes.* need 16"):
        load_onnx(model)


@pytest.mark.parametrize(
    ("repeats", "error", "message"),
    [
        (np.array([-1, 2], np.int64), ShapeError, r"repeats \[-1, 2\] include a negative count"),
        (np.array([np.nan, 2], np.float32), GlowError, r"repeats.* has element type float32.* integers"),
    ],
)
def test_bad_tile_repeats(rng, repeats, error, message) -> None:
    model = one("Tile", ["x", "r"], {"x": normal(rng, 2, 3)}, inits={"r": repeats})
    with pytest.raises(error, match=rf"'tile_node' \(Tile\).*{message}"):
        load_onnx(model)


def test_attributes_are_checked_against_the_schema(rng) -> None:
    x = normal(rng, 1, 1, 6, 6)
    pool = {"kernel_shape": [2, 2], "dilations": [2, 2]}
    with pytest.raises(ModelLoadError, match=r"'averagepool_node'.*unknown attribute 'dilations'.*opset 11"):
        load_onnx(one("AveragePool", ["x"], {"x": x}, **pool))
    check(one("AveragePool", ["x"], {"x": x}, opset=19, **pool), {"x": x})  # allowed since opset 19
    with pytest.raises(ModelLoadError, match=r"'relu_node' \(Relu\): unknown attribute 'foo'"):
        load_onnx(one("Relu", ["x"], {"x": x}, foo=3))
    with pytest.raises(ModelLoadError, match=r"attribute 'axis' has type FLOAT, but Softmax declares INT"):
        load_onnx(one("Softmax", ["x"], {"x": x}, axis=1.5))
    with pytest.raises(ModelLoadError, match=r"required attribute\(s\) \['to'\] missing"):
        load_onnx(one("Cast", ["x"], {"x": x}))


def test_absurd_pads_are_refused(rng) -> None:
    feeds = {"x": normal(rng, 1, 1, 4, 4)}
    model = one("Conv", ["x", "w"], feeds, inits={"w": normal(rng, 1, 1, 1, 1)}, pads=[2**31 - 1] * 4)
    message = _no_big_allocation(lambda: load_onnx(model))
    assert "'conv_node' (Conv)" in message and "4294967298" in message


@pytest.mark.parametrize("source", ["bytes", "proto", "file"])
def test_empty_models_are_refused(tmp_path, registry, capsys, source) -> None:
    model: object = {"bytes": b"", "proto": onnx.ModelProto()}.get(source)
    if source == "file":
        path = tmp_path / "empty.onnx"
        path.write_bytes(b"")
        assert main(["run", str(path)]) == 2
        assert "no graph or no graph outputs" in capsys.readouterr().err
        return
    with pytest.raises(ModelLoadError, match="no graph or no graph outputs"):
        glow_core.compile(model)


def test_a_graph_without_outputs_is_refused(rng) -> None:
    model = one("Relu", ["x"], {"x": normal(rng, 2)})
    del model.graph.output[:]
    with pytest.raises(ModelLoadError, match="no graph outputs"):
        load_onnx(model)


def test_two_definitions_of_one_tensor_are_refused(rng) -> None:
    x = normal(rng, 2, 3)
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="a"),
        helper.make_node("Neg", ["x"], ["y"], name="b"),
    ]
    with pytest.raises(
        ModelLoadError, match=r"tensor 'y' has two definitions, node 'a' \(Relu\) and node 'b'"
    ):
        load_onnx(model_of(nodes, {"x": x}))
    overwrite = [helper.make_node("Relu", ["x"], ["x"], name="c")]
    with pytest.raises(ModelLoadError, match=r"'x' has two definitions, graph input 'x' and node 'c'"):
        load_onnx(model_of(overwrite, {"x": x}, outputs=["x"]))


def test_duplicate_graph_outputs_are_named(rng) -> None:
    model = one("Relu", ["x"], {"x": normal(rng, 2)})
    model.graph.output.append(model.graph.output[0])
    with pytest.raises(ModelLoadError, match=r"graph output 'y' is listed twice.*Identity"):
        load_onnx(model)


def test_versions_newer_than_onnx_knows_are_refused_as_onnxruntime_does(rng) -> None:
    newest = onnx.defs.onnx_opset_version()
    model = one("Relu", ["x"], {"x": normal(rng, 2)})
    model.opset_import[0].version = newest + 1
    with pytest.raises(
        ModelLoadError, match=rf"opset {newest + 1} of domain 'ai.onnx', newer .* \({newest}\)"
    ):
        load_onnx(model)
    model.opset_import[0].version = 17
    model.ir_version = onnx.IR_VERSION + 1
    with pytest.raises(ModelLoadError, match=rf"IR version {onnx.IR_VERSION + 1}, newer"):
        load_onnx(model)


def test_an_op_older_than_the_models_opset_is_refused(rng) -> None:
    x = normal(rng, 2, 4)
    with pytest.raises(ModelLoadError, match=r"'LayerNormalization' does not exist at opset 13"):
        load_onnx(one("LayerNormalization", ["x", "s"], {"x": x}, inits={"s": normal(rng, 4)}, opset=13))


def test_glow_run_on_an_empty_output(tmp_path, registry, capsys) -> None:
    path = tmp_path / "empty_out.onnx"
    onnx.save(one("Relu", ["x"], {"x": np.ones((0, 3), np.float32)}), path)
    assert main(["run", str(path)]) == 0
    captured = capsys.readouterr()
    assert "y: float32[0, 3] (empty: no elements)" in captured.out and "Warning" not in captured.err


def test_session_refuses_an_input_against_a_declared_static_dim(rng, registry) -> None:
    model = one("Relu", ["x"], {"x": normal(rng, 2)})
    session = glow_core.load(model)
    with pytest.raises(InputError, match=r"input 'x' has shape \(3,\), but the model declares \[2\]"):
        session.run({"x": normal(rng, 3)})
    x = normal(rng, 2)
    np.testing.assert_array_equal(session.run({"x": x})["y"], np.maximum(x, 0))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"  # symbolic: any length
    y = glow_core.load(model).run({"x": normal(rng, 3)})["y"]
    assert y.shape == (3,)


# ---- part 7: external data ---------------------------------------------------------------------


@pytest.fixture
def external_model(tmp_path, rng):
    """A Gemm whose weight lives in ``data/w.bin`` beside ``data/model.onnx``; (folder, x, w)."""
    folder = tmp_path / "data"
    folder.mkdir()
    x, w = normal(rng, 2, 3), normal(rng, 3, 4)
    model = one("MatMul", ["x", "w"], {"x": x}, inits={"w": w})
    onnx.save_model(
        model, folder / "model.onnx", save_as_external_data=True, location="w.bin", size_threshold=0
    )
    return folder, x, w


def _external_proto(folder) -> onnx.ModelProto:
    return onnx.load(str(folder / "model.onnx"), load_external_data=False)


def _set_location(model: onnx.ModelProto, location: str) -> onnx.ModelProto:
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    return model


def test_external_data_from_a_path_reads_the_models_folder(external_model) -> None:
    folder, x, w = external_model
    module = load_onnx(folder / "model.onnx")
    np.testing.assert_allclose(evaluate(module, {"x": x})["y"], x @ w, rtol=1e-6)


def test_external_data_from_bytes_or_a_proto_needs_base_dir(external_model, monkeypatch) -> None:
    folder, x, w = external_model
    proto = _external_proto(folder)
    monkeypatch.chdir(folder)  # the working directory holds w.bin, and must not be used
    for source in (proto, proto.SerializeToString()):
        with pytest.raises(ModelLoadError, match=r"external data files.*pass base_dir="):
            load_onnx(source)
        module = load_onnx(source, base_dir=folder)
        np.testing.assert_allclose(evaluate(module, {"x": x})["y"], x @ w, rtol=1e-6)
    assert proto.graph.initializer[0].data_location == TensorProto.EXTERNAL  # the caller's proto is untouched


def test_external_data_through_compile_and_load(external_model, registry) -> None:
    folder, x, w = external_model
    proto = _external_proto(folder)
    compiled = glow_core.compile(proto, base_dir=folder)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], x @ w, rtol=1e-5)
    session = glow_core.load(proto.SerializeToString(), base_dir=folder)
    np.testing.assert_allclose(session.run({"x": x})["y"], x @ w, rtol=1e-5)


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("../secret.bin", r"'\.\./secret\.bin' must be a relative path inside"),
        ("/etc/passwd", r"'/etc/passwd' must be a relative path inside"),
        ("link.bin", r"'link\.bin' resolves to .* outside"),
        ("missing.bin", r"file 'missing\.bin' does not exist"),
    ],
)
def test_external_data_outside_the_folder_is_refused(external_model, location, message) -> None:
    folder, _, _ = external_model
    (folder.parent / "secret.bin").write_bytes((folder / "w.bin").read_bytes())
    os.symlink(folder.parent / "secret.bin", folder / "link.bin")
    model = _set_location(_external_proto(folder), location)
    with pytest.raises(ModelLoadError, match=rf"initializer 'w': external data location {message}|{message}"):
        load_onnx(model, base_dir=folder)
    onnx.save(model, folder / "moved.onnx")
    with pytest.raises(ModelLoadError, match=message):
        load_onnx(folder / "moved.onnx")


def test_external_data_shorter_than_declared_is_refused(external_model) -> None:
    folder, _, _ = external_model
    (folder / "w.bin").write_bytes((folder / "w.bin").read_bytes()[:20])
    with pytest.raises(ModelLoadError, match=r"initializer 'w'.*(exceeds|need 48)"):
        load_onnx(folder / "model.onnx")
    with pytest.raises(ModelLoadError, match="is not a directory"):
        load_onnx(_external_proto(folder), base_dir=folder / "w.bin")
