"""The suite's parts: case generation, comparison, node-test data, the ONNX backend, xfails."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from glow_conformance.case import layer_of, parse_layers
from glow_conformance.compare import check_onnx_outputs, check_result
from glow_conformance.onnx_backend import GlowBackend
from glow_conformance.onnx_data import load_node_tests
from glow_conformance.primitives_layer import ClaimCase, OpCase, claim_cases, generate
from glow_conformance.report import markdown
from glow_conformance.results import CaseResult, Outcome, Scoreboard
from glow_conformance.variants import ELEMENTWISE_SHAPES
from glow_conformance.xfail import load_xfails
from onnx import TensorProto, helper, numpy_helper

from glow_core.backend import BackendInfo
from glow_core.errors import GlowError, UnsupportedOpError
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type

# ---- generating primitive cases -------------------------------------------------------


def _ids(kind: str, elem: str) -> set[str]:
    cases, problem = claim_cases(kind, elem)
    assert not problem
    return {c.id for c in cases}


def test_examples_keep_their_spec_ids_and_get_variants():
    matmul = _ids("MatMul", "float32")
    assert {"MatMul[float32-4x3_3x5]", "MatMul[float32-1x64_64x33]", "MatMul[float32-17x1_1x9]"} <= matmul
    assert "MatMul[float32-8x6_6x10]" in matmul  # scaled by 2, accepted by the type rule
    assert "MatMul[float32-5x4_4x6]" in matmul  # every dim + 1: odd sizes


def test_elementwise_variants_cover_awkward_sizes():
    add = _ids("Add", "int8")
    for shape in ELEMENTWISE_SHAPES:
        dims = "x".join(map(str, shape))
        assert f"Add[int8-{dims}_{dims}]" in add
    assert any(np.prod(s) > 2**17 for s in ELEMENTWISE_SHAPES)


def test_other_kinds_retype_only_the_operands_of_the_result_kind():
    assert "Gather[float32-5x4_i64.3]" in _ids("Gather", "float32")  # operands of another kind say so
    gather = _ids("Gather", "int64")
    assert "Gather[int64-5x4_3]" in gather  # data became int64, indices stayed int64
    assert "Gather[int64-3x6_i32.2x2]" in gather  # int32 indices stayed int32
    splat, _ = claim_cases("Splat", "int8")
    assert all(c.attrs["elem"] == "int8" for c in splat)
    convert, _ = claim_cases("Convert", "bool")
    assert {t.elem for c in convert for t in c.types} == {ElemKind.float32, ElemKind.int64}


def test_a_fixed_result_kind_claim_names_the_operand_kind():
    argmax, _ = claim_cases("ArgMax", "float16")
    assert argmax and all(c.types[0].elem is ElemKind.float16 for c in argmax)
    # Compare gives bool and is keyed by lhs: its bool claim is a kernel reading bools.
    compare, _ = claim_cases("Compare", "bool")
    assert compare and all(t.elem is ElemKind.bool for c in compare for t in c.types)


def test_every_generated_case_is_accepted_by_its_type_rule_and_ids_are_unique():
    info = BackendInfo(
        name="all",
        version="0",
        device="test",
        supports={k: sorted(e.name for e in s.kinds) for k, s in PRIMITIVES.items()},
    )
    cases = generate(info)
    assert len({c.id for c in cases}) == len(cases)
    claims = {c.id for c in cases if isinstance(c, ClaimCase)}
    assert claims == {f"{k}[{e}]" for k, elems in info.supports.items() for e in elems}
    for case in cases:
        if isinstance(case, OpCase):
            spec = PRIMITIVES[case.kind]
            spec.infer_type(list(case.types), spec.complete_attrs(case.attrs))
    assert not [c.id for c in cases if isinstance(c, ClaimCase) and c.problem]


def test_layers_and_ids():
    assert parse_layers("models,primitives") == ("primitives", "models")
    assert parse_layers(None) == ("primitives", "onnx", "models", "partitions")
    with pytest.raises(GlowError, match="unknown conformance layer"):
        parse_layers("primitives,nodes")
    assert [layer_of(i) for i in ("Add[float32]", "onnx:test_abs", "model:mlp[b1]")] == [
        "primitives",
        "onnx",
        "models",
    ]


# ---- comparing ------------------------------------------------------------------------


def test_check_result_names_the_problem():
    t = Type((2, 3), ElemKind.float32)
    expected = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert check_result(expected.astype(np.float32), expected, t).outcome is Outcome.PASSED
    poisoned = np.full((2, 3), np.nan, np.float32)
    assert "not finite" in check_result(poisoned, expected, t).message
    off = expected.astype(np.float32)
    off[1, 2] += 1
    assert "worst at [1,2]: got 6, expected 5" in check_result(off, expected, t).message
    assert "the type rule says" in check_result(off.astype(np.float16), expected, t).message
    ints = Type((3,), ElemKind.int8)
    message = check_result(np.array([1, 2, 4], np.int8), np.array([1, 2, 3]), ints).message
    assert message == "1 of 3 elements differ; first at [2]: got 4, expected 3"


def test_check_onnx_outputs_like_onnx_runner():
    a = np.array([1.0, 2.0], np.float32)
    assert check_onnx_outputs([a], [a + 1e-5], 1e-3, 1e-7).outcome is Outcome.PASSED
    assert "dtype float64" in check_onnx_outputs([a.astype(np.float64)], [a], 1e-3, 1e-7).message
    assert "returned 2 outputs" in check_onnx_outputs([a, a], [a], 1e-3, 1e-7).message
    bf16 = a.astype(ml_bfloat16())
    assert check_onnx_outputs([bf16], [(a * 1.005).astype(ml_bfloat16())], 1e-3, 0).outcome is Outcome.PASSED
    assert check_onnx_outputs([[a, a]], [[a, a]], 1e-3, 1e-7).outcome is Outcome.PASSED
    assert "item 1" in check_onnx_outputs([[a, a]], [[a, a + 1]], 1e-3, 1e-7).message


def ml_bfloat16():
    return ElemKind.bfloat16.dtype


# ---- node-test data -------------------------------------------------------------------


def _write_case(root, name: str, op: str) -> None:
    case = root / name
    (case / "test_data_set_0").mkdir(parents=True)
    node = helper.make_node(op, ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(case / "model.onnx"))
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    y = np.maximum(x, 0) if op == "Relu" else np.abs(x)
    for kind, value in (("input", x), ("output", y)):
        data = numpy_helper.from_array(value).SerializeToString()
        (case / "test_data_set_0" / f"{kind}_0.pb").write_bytes(data)


def test_node_tests_read_from_a_data_directory(tmp_path, registry):
    _write_case(tmp_path, "test_relu", "Relu")
    _write_case(tmp_path, "test_relu_expanded", "Abs")  # stands for a function body
    tests = load_node_tests(str(tmp_path))
    assert [t.name for t in tests] == ["test_relu", "test_relu_expanded"]
    assert [t.op_type for t in tests] == ["Relu", "Relu"]
    inputs, outputs = tests[0].data_sets[0]
    np.testing.assert_array_equal(outputs[0], [0.0, 0.0, 2.0])
    rep = GlowBackend.prepare(tests[0].model, backend="interpreter")
    np.testing.assert_array_equal(rep.run(inputs)[0], outputs[0])
    with pytest.raises(GlowError, match="does not exist"):
        load_node_tests(str(tmp_path / "missing"))


# ---- the ONNX backend interface -----------------------------------------------------


def test_glow_as_an_onnx_backend(registry):
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    (c,) = GlowBackend.for_backend("interpreter").run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)
    assert GlowBackend.supports_device("CPU") and not GlowBackend.supports_device("CUDA")
    map_type = helper.make_map_type_proto(
        TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
    )
    maps = helper.make_graph(
        [helper.make_node("Identity", ["m"], ["y"])],
        "maps",
        [helper.make_value_info("m", map_type)],
        [helper.make_value_info("y", map_type)],
    )
    model = helper.make_model(maps, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="map"):
        GlowBackend.prepare(model, backend="interpreter")


# ---- xfail declarations -----------------------------------------------------------------


def _vendor_package(tmp_path, monkeypatch, name: str, filename: str, text: str):
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text(
        "from conformance_fakes import SmallInterpreter\n\n"
        "class VendorBackend(SmallInterpreter):\n"
        "    name = 'vendor'\n"
        "    xfail = {'Add[float32]': 'from info'}\n"
    )
    (package / filename).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    return module.VendorBackend()


def test_xfail_files_in_the_backend_package_are_merged(tmp_path, monkeypatch):
    toml = '[xfail]\n"Sub[float32-4x5_4x5]" = "from toml"\n'
    backend = _vendor_package(tmp_path, monkeypatch, "vendor_toml", "conformance_xfail.toml", toml)
    xfails = load_xfails(backend)
    assert xfails.reasons == {"Add[float32]": "from info", "Sub[float32-4x5_4x5]": "from toml"}
    assert xfails.sources["Sub[float32-4x5_4x5]"] == "conformance_xfail.toml"
    as_json = json.dumps({"xfail": {"onnx:test_abs": "from json"}})
    backend = _vendor_package(tmp_path, monkeypatch, "vendor_json", "conformance_xfail.json", as_json)
    assert load_xfails(backend).reasons["onnx:test_abs"] == "from json"
    assert load_xfails(backend).unknown({"Add[float32]"}, ["primitives"]) == []
    assert load_xfails(backend).unknown({"Add[float32]"}, ["onnx"]) == ["onnx:test_abs"]


def test_a_malformed_xfail_file_is_an_error(tmp_path, monkeypatch):
    backend = _vendor_package(tmp_path, monkeypatch, "vendor_bad", "conformance_xfail.toml", "xfail = 3\n")
    with pytest.raises(GlowError, match="must hold one table `xfail`"):
        load_xfails(backend)


# ---- reports ----------------------------------------------------------------------------


def test_markdown_scoreboard_has_a_table_per_layer():
    board = Scoreboard("demo", {"version": "1", "date": "today"})
    board.add(CaseResult("onnx:test_abs", "onnx", "Abs", Outcome.PASSED))
    board.add(CaseResult("onnx:test_cos", "onnx", "Cos", Outcome.UNSUPPORTED, "op 'Cos' not supported"))
    board.add(CaseResult("Add[float32-1_1]", "primitives", "Add", Outcome.FAILED, "relative error 1"))
    text = markdown(board)
    assert "**FAIL**: demo 1 on today" in text
    assert "| onnx | 1 | 0 | 1 |" in text
    assert "| Cos | 1 | op 'Cos' not supported |" in text
    assert "- `Add[float32-1_1]` **failed**: relative error 1" in text
    assert board.to_dict()["layers"]["onnx"]["groups"]["Abs"]["passed"] == 1
