"""Control flow and shape specialization in the ONNX frontend: If with a known condition,
Scan and Loop unrolled where the trip count is static (a data-dependent Loop refused),
static inputs specializing shapes, runtime shape errors naming the inputs behind them (split
from test_onnx_coverage_layers.py, same method)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_cases import I64, B, F, check, model_of, normal, one

from glow_core.errors import UnsupportedOpError
from glow_core.frontends.onnx import LoadTimeValueError, load_onnx
from glow_core.lowering.evaluate import evaluate

# ---- control flow and shape specialization ---------------------------------------------------


def _if_model(cond_is_input: bool) -> tuple:
    then_graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, None)],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, None)],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_graph, else_branch=else_graph)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    feeds = {"x": x, "c": np.array(False)} if cond_is_input else {"x": x}
    inits = {"one": np.ones(3, np.float32)} | ({} if cond_is_input else {"c": np.array(True)})
    return model_of([node], feeds, inits=inits), feeds


def test_if_with_known_condition_imports_one_branch() -> None:
    model, feeds = _if_model(cond_is_input=False)
    module = check(model, feeds)
    assert "Mul" not in {n.kind for n in module.function.nodes}
    model, feeds = _if_model(cond_is_input=True)
    with pytest.raises(LoadTimeValueError, match=r"\(If\): input 0 \(condition.*static_inputs.*\['c'\]"):
        load_onnx(model)
    check(model, feeds, static=["c"])


def test_scan_is_unrolled(rng) -> None:
    """A running sum and a reversed scan input: states carried, per-step outputs stacked."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["y_t"]),
        ],
        "body",
        [helper.make_tensor_value_info("s_in", F, [3]), helper.make_tensor_value_info("x_t", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]), helper.make_tensor_value_info("y_t", F, [3])],
    )
    feeds = {"s0": normal(rng, 3), "x": normal(rng, 5, 3)}
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "y"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[1],
        scan_output_axes=[1],
    )
    check(model_of([node], feeds, outputs={"s": F, "y": F}, opset=16), feeds)


def _loop_body(condition_from_data: bool):
    nodes = [
        helper.make_node("Add", ["v_in", "v_in"], ["v_out"]),
        helper.make_node("Identity", ["v_out"], ["scan"]),
    ]
    if condition_from_data:
        nodes.append(helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0))
        nodes.append(helper.make_node("Less", ["total", "limit"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c_in", B, []),
            helper.make_tensor_value_info("v_in", F, [2]),
        ],
        [
            helper.make_tensor_value_info("c_out", B, []),
            helper.make_tensor_value_info("v_out", F, [2]),
            helper.make_tensor_value_info("scan", F, [2]),
        ],
    )


def test_loop_with_known_trip_count_is_unrolled_and_data_dependent_one_refused(rng) -> None:
    feeds = {"v": normal(rng, 2)}
    inits = {"m": np.array(3, np.int64), "c": np.array(True), "limit": np.array(100.0, np.float32)}
    node = helper.make_node(
        "Loop", ["m", "c", "v"], ["v_final", "stacked"], name="loop", body=_loop_body(False)
    )
    check(model_of([node], feeds, outputs={"v_final": F, "stacked": F}, inits=inits, opset=16), feeds)
    node = helper.make_node(
        "Loop", ["m", "c", "v"], ["v_final", "stacked"], name="loop", body=_loop_body(True)
    )
    with pytest.raises(
        UnsupportedOpError, match=r"'loop' \(Loop\): the loop condition is computed at run time"
    ):
        load_onnx(model_of([node], feeds, outputs={"v_final": F, "stacked": F}, inits=inits, opset=16))


def test_static_inputs_specialize_shapes(rng) -> None:
    x = normal(rng, 2, 6)
    feeds = {"x": x, "shape": np.array([3, 4], np.int64)}
    model = one("Reshape", ["x", "shape"], feeds)
    with pytest.raises(LoadTimeValueError) as info:
        load_onnx(model)
    assert info.value.inputs == ("shape",)
    module = check(model, feeds, static=["shape"])
    assert list(module.placeholders) == ["x", "y"]
    with pytest.raises(Exception, match="static_inputs names"):
        load_onnx(model, static_inputs={"nope": np.zeros(1)})


def test_runtime_shape_error_names_the_graph_inputs_behind_it(rng) -> None:
    """A shape computed from an input (Cast then Reshape) names that input for specialization."""
    x = normal(rng, 2, 6)
    nodes = [
        helper.make_node("Cast", ["s"], ["s64"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "s64"], ["y"]),
    ]
    feeds = {"x": x, "s": np.array([4, 3], np.int32)}
    with pytest.raises(LoadTimeValueError, match=r"\['s'\]") as info:
        load_onnx(model_of(nodes, feeds))
    assert info.value.inputs == ("s",)
    np.testing.assert_array_equal(
        evaluate(load_onnx(model_of(nodes, feeds), static_inputs={"s": feeds["s"]}), {"x": x})["y"],
        x.reshape(4, 3),
    )
