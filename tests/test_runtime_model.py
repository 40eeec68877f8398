"""glow_core.load: a Session re-specializes per input shapes and runs data-dependent control flow.

Every model is built with onnx.helper and checked against onnx.reference (onnxruntime for
scans, which onnx.reference does not run backwards or batched) on seeded random inputs, on
the interpreter, the cpu backend and the opencl one.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from installed_backends import install_backend
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import relative_error
from glow_core.errors import InputError
from glow_core.frontends.onnx import LoadTimeValueError, load_onnx
from glow_core.runtime import SpecializationError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
BACKENDS = ["interpreter", "cpu", "opencl"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, install_registry) -> str:
    """Each backend by name (skipped when its plugin or device is missing)."""
    return install_backend(install_registry, request.param)


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _expected(model: onnx.ModelProto, feeds: dict[str, np.ndarray], oracle: str) -> list[np.ndarray]:
    if oracle == "onnxruntime":
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def _check(session, model, feeds, oracle="reference", rtol=1e-5) -> dict[str, np.ndarray]:
    """Run ``session``, compare every output with the oracle by relative error."""
    got = session.run(feeds)
    expected = _expected(model, feeds, oracle)
    for name, want in zip(session.output_names, expected, strict=True):
        assert got[name].shape == want.shape, name
        assert relative_error(got[name], want) <= rtol, name
    return got


def _if_on_sum() -> onnx.ModelProto:
    """y = x * x if sum(x) > 0 else -x: the condition is computed from the input."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)]
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    zero = helper.make_tensor("zero", F, [], [0.0])
    return _model(nodes, [("x", F, ["N", 3])], [("y", F)], [zero])


def test_if_on_a_computed_condition_takes_both_branches(backend, rng):
    model = _if_on_sum()
    session = glow_core.load(model, backend=backend)
    assert session.stats.compilations == 0  # symbolic batch and a data-dependent If: wait for a call
    for sign in (1, -1, 1, -1):
        x = (sign * np.abs(rng.standard_normal((4, 3)))).astype(np.float32)
        got = _check(session, model, {"x": x})
        np.testing.assert_allclose(got["y"], x * x if sign > 0 else -x, rtol=1e-6)
    # One specialization per branch, each found again by reading its condition back.
    assert session.stats.compilations == 2
    assert session.stats.probe_compilations == 1
    assert session.stats.cache_hits == 2


def test_load_onnx_alone_still_refuses_a_computed_condition():
    with pytest.raises(LoadTimeValueError, match=r"\(If\): input 0 \(condition") as info:
        load_onnx(_if_on_sum())
    assert info.value.inputs == ("x",)


def _while_loop() -> onnx.ModelProto:
    """v doubles while sum(v) < limit; every doubling is also a scan output (a while-loop)."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
            helper.make_node("Identity", ["v_out"], ["step"]),
            helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", B, []),
            helper.make_tensor_value_info("v_in", F, [3]),
        ],
        [
            helper.make_tensor_value_info("c_out", B, []),
            helper.make_tensor_value_info("v_out", F, [3]),
            helper.make_tensor_value_info("step", F, [3]),
        ],
    )
    loop = helper.make_node("Loop", ["", "go", "v"], ["v_final", "steps"], body=body)
    inits = [helper.make_tensor("go", B, [], [True]), helper.make_tensor("two", F, [], [2.0])]
    return _model([loop], [("v", F, [3]), ("limit", F, [])], [("v_final", F), ("steps", F)], inits)


def test_while_loop_runs_as_many_iterations_as_the_data_says(backend, rng):
    model = _while_loop()
    session = glow_core.load(model, backend=backend)
    v = np.abs(rng.standard_normal(3)).astype(np.float32) + 0.1
    total = float(v.sum())
    iterations = []
    for factor in (3.0, 20.0, 3.0):  # 2, 5 and 2 doublings
        limit = np.array(total * factor, np.float32)
        got = _check(session, model, {"v": v, "limit": limit})
        iterations.append(got["steps"].shape[0])
    assert iterations == [2, 5, 2]
    assert session.stats.compilations == 2 and session.stats.cache_hits == 1
    # The 5-iteration variant reused the 2 conditions it read back and probed 3 new ones.
    assert session.stats.probe_compilations == 2 + 3


def test_runaway_loop_is_refused_with_a_clear_error(interpreter, rng):
    session = glow_core.load(_while_loop(), backend=interpreter, max_probes=3)
    v = np.abs(rng.standard_normal(3)).astype(np.float32) + 0.1
    with pytest.raises(SpecializationError, match=r"more than 3 values computed from the inputs.*max_probes"):
        session.run({"v": v, "limit": np.array(v.sum() * 100, np.float32)})


def test_loop_trip_count_given_as_an_input_is_specialized_per_value(backend, rng):
    body = helper.make_graph(
        [
            helper.make_node("Add", ["a_in", "x"], ["a_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", B, []),
            helper.make_tensor_value_info("a_in", F, [2, 3]),
        ],
        [helper.make_tensor_value_info("c_out", B, []), helper.make_tensor_value_info("a_out", F, [2, 3])],
    )
    # An explicit condition: onnx.reference runs no iteration when it is left out.
    loop = helper.make_node("Loop", ["m", "go", "a"], ["y"], body=body)
    go = helper.make_tensor("go", B, [], [True])
    model = _model([loop], [("m", I64, []), ("a", F, [2, 3]), ("x", F, [2, 3])], [("y", F)], [go])
    session = glow_core.load(model, backend=backend)
    for m in (3, 1, 3):
        feeds = {
            "m": np.array(m, np.int64),
            "a": rng.standard_normal((2, 3)).astype(np.float32),
            "x": rng.standard_normal((2, 3)).astype(np.float32),
        }
        _check(session, model, feeds)
    assert session.stats.compilations == 2 and session.stats.probe_compilations == 0


def _scan_body() -> onnx.GraphProto:
    return helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["y_t"]),
        ],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])],
    )


def test_scan_runs_for_every_sequence_length(backend, rng):
    scan = helper.make_node(
        "Scan", ["s0", "x"], ["s", "y"], body=_scan_body(), num_scan_inputs=1, scan_input_directions=[1]
    )
    model = _model([scan], [("s0", F, [2]), ("x", F, ["T", 2])], [("s", F), ("y", F)])
    session = glow_core.load(model, backend=backend)
    for steps in (4, 2):
        feeds = {
            "s0": rng.standard_normal(2).astype(np.float32),
            "x": rng.standard_normal((steps, 2)).astype(np.float32),
        }
        # onnx.reference does not scan backwards.
        assert _check(session, model, feeds, oracle="onnxruntime")["y"].shape == (steps, 2)


def test_scan8_batches_rows_of_different_lengths(backend, rng):
    """Scan-8: batch axis 0, per-row sequence_lens, one reversed scan input, zero padding."""
    scan = helper.make_node(
        "Scan", ["lens", "s0", "x"], ["s", "y"], body=_scan_body(), num_scan_inputs=1, directions=[1]
    )
    model = _model(
        [scan], [("lens", I64, [3]), ("s0", F, [3, 2]), ("x", F, [3, 4, 2])], [("s", F), ("y", F)], opset=8
    )
    feeds = {
        "lens": np.array([4, 2, 3], np.int64),
        "s0": rng.standard_normal((3, 2)).astype(np.float32),
        "x": rng.standard_normal((3, 4, 2)).astype(np.float32),
    }
    got = _check(glow_core.load(model, backend=backend), model, feeds, oracle="onnxruntime")
    assert not got["y"][1, 2:].any()  # row 1 runs 2 of 4 steps


def _batched_mlp(rng) -> onnx.ModelProto:
    w = helper.make_tensor("w", F, [5, 4], rng.standard_normal((5, 4)).astype(np.float32).ravel())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    return _model(nodes, [("x", F, ["batch", 5])], [("y", F)], [w])


def test_a_new_batch_size_respecializes_and_a_repeat_hits_the_cache(backend, rng):
    model = _batched_mlp(rng)
    session = glow_core.load(model, backend=backend, input_shapes={"x": [2, 5]})
    assert session.stats.compilations == 1  # compiled for the given shapes right away
    for batch in (2, 7, 2, 7, 1):
        _check(session, model, {"x": rng.standard_normal((batch, 5)).astype(np.float32)})
    assert session.stats.compilations == 3 and session.stats.cache_hits == 3
    # A plain CompiledFunction keeps its one shape and says how to get another.
    compiled = glow_core.compile(model, backend=backend, input_shapes={"x": [2, 5]})
    with pytest.raises(InputError, match=r"shape \(7, 5\), expected \(2, 5\).*input_shapes"):
        compiled.run({"x": np.ones((7, 5), np.float32)})


def test_bad_inputs_are_refused_before_anything_compiles(interpreter, rng):
    session = glow_core.load(_batched_mlp(rng), backend=interpreter)
    with pytest.raises(InputError, match=r"missing \['x'\]"):
        session.run({})
    with pytest.raises(InputError, match=r"dtype float64, the model declares float32.*astype"):
        session.run({"x": np.ones((2, 5))})
    with pytest.raises(InputError, match=r"shape \(5,\) \(rank 1\), the model declares rank 2"):
        session.run({"x": np.ones(5, np.float32)})
    assert session.stats.compilations == 0


def test_a_model_the_backend_cannot_take_fails_at_load_when_shapes_are_known(interpreter):
    model = _model([helper.make_node("Bernoulli", ["x"], ["y"])], [("x", F, [2])], [("y", F)])
    with pytest.raises(glow_core.GlowError, match="Bernoulli"):
        glow_core.load(model, backend=interpreter)


def test_the_onnx_backend_interface_runs_models_through_a_session(interpreter, rng):
    from glow_conformance.onnx_backend import GlowBackend

    model = _if_on_sum()
    rep = GlowBackend.prepare(model, backend=interpreter)
    assert isinstance(rep.session, glow_core.Session)
    for sign in (1, -1):
        x = (sign * np.abs(rng.standard_normal((3, 3)))).astype(np.float32)
        (y,) = rep.run([x])
        assert relative_error(y, _expected(model, {"x": x}, "reference")[0]) <= 1e-6
