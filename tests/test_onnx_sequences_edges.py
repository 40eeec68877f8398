"""ONNX sequences at the edges: how the loader lays them out as placeholders, what glow
refuses (naming the input or node), and the ONNX backend interface passing lists and None."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from sequence_cases import (
    I64,
    B,
    F,
    assert_same,
    model,
    normal,
    optional,
    sequence,
    sequence_type,
    tensor,
    tensor_type,
)

import glow_core
from glow_core.errors import InputError, ModelLoadError, UnsupportedOpError
from glow_core.frontends.onnx import load_onnx
from glow_core.frontends.onnx.loader import load_onnx_structured
from glow_core.runtime import SpecializationError

# ---- the loader's view: placeholders and layout ------------------------------------------


def test_sequence_elements_are_placeholders_and_outputs_by_index(interpreter: str) -> None:
    proto = model(
        [helper.make_node("SequenceInsert", ["xs", "x"], ["ys"])],
        [sequence("xs", F, [None]), tensor("x", F, [4])],
        [sequence("ys", F, [None])],
    )
    loaded = load_onnx_structured(proto, input_shapes={"xs": [[2], [3]]})
    inputs = {n: p.type.shape for n, p in loaded.module.placeholders.items() if not p.is_output}
    assert inputs == {"xs[0]": (2,), "xs[1]": (3,), "x": (4,)}
    assert loaded.outputs == {"ys": ("ys[0]", "ys[1]", "ys[2]")}
    compiled = glow_core.compile(load_onnx(proto, input_shapes={"xs": [[1]]}), backend=interpreter)
    assert set(compiled.output_types) == {"ys[0]", "ys[1]"}


# ---- what glow refuses -------------------------------------------------------------------


@pytest.fixture
def seq_model() -> onnx.ModelProto:
    return model(
        [helper.make_node("SequenceAt", ["xs", "i"], ["y"])],
        [sequence("xs", F, [2]), tensor("i", I64, [])],
        [tensor("y", F, [2])],
    )


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        (
            {"xs": np.zeros((2, 2), np.float32)},
            r"input 'xs' is a sequence of tensors: pass a list of numpy arrays",
        ),
        ({"xs": None}, r"input 'xs' is None, but the model declares a sequence of tensors"),
        ({"xs": [np.ones(2, np.float32), np.ones(2, np.int64)]}, r"input 'xs' item 1 has dtype int64"),
        ({"xs": [np.ones((1, 2), np.float32)]}, r"input 'xs' item 0 has shape \(1, 2\) \(rank 2\)"),
        ({"xs": [[1.0, 2.0]]}, r"input 'xs' item 0 must be a numpy array, got list"),
        ({"xs": [np.ones(2, np.float32)], "i": [0]}, r"input 'i' must be a numpy array, got list"),
    ],
)
def test_wrong_input_kinds_are_refused_naming_the_input(
    interpreter: str, seq_model: onnx.ModelProto, feeds: dict[str, Any], message: str
) -> None:
    session = glow_core.load(seq_model, backend=interpreter)
    with pytest.raises(InputError, match=message):
        session.run({"i": np.array(0, np.int64), **feeds})


def test_load_onnx_needs_the_length_of_a_sequence_input(seq_model: onnx.ModelProto) -> None:
    with pytest.raises(
        ModelLoadError, match=r"input 'xs' is a sequence.*input_shapes=\{'xs': \[\[\.\.\.\], \.\.\.\]\}"
    ):
        load_onnx(seq_model, static_inputs={"i": np.array(0, np.int64)})
    with pytest.raises(InputError, match="one shape per element"):
        load_onnx(seq_model, input_shapes={"xs": [2, 2]}, static_inputs={"i": np.array(0, np.int64)})


def test_positions_out_of_range_are_refused(interpreter: str, seq_model: onnx.ModelProto) -> None:
    session = glow_core.load(seq_model, backend=interpreter)
    xs = [np.ones(2, np.float32)] * 2
    with pytest.raises(SpecializationError, match=r"position 2 is outside \[-2, 1\] for a sequence of 2"):
        session.run({"xs": xs, "i": np.array(2, np.int64)})
    with pytest.raises(SpecializationError, match="the sequence is empty"):
        session.run({"xs": [], "i": np.array(0, np.int64)})


def test_empty_tensors_are_refused_not_crashed_on(interpreter: str, rng: np.random.Generator) -> None:
    concat = model(
        [helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
        [sequence("xs", F, [None])],
        [tensor("y", F, [None])],
    )
    session = glow_core.load(concat, backend=interpreter)
    np.testing.assert_array_equal(session.run({"xs": [np.ones(2, np.float32)]})["y"], np.ones(2, np.float32))
    with pytest.raises(SpecializationError, match="glow has no empty tensors"):
        session.run({"xs": []})
    split = model(
        [helper.make_node("SplitToSequence", ["x", "sizes"], ["pieces"])],
        [tensor("x", F, [3])],
        [sequence("pieces", F, [None])],
        {"sizes": np.array([3, 0], np.int64)},
    )
    with pytest.raises(UnsupportedOpError, match="empty piece; glow has no empty tensors"):
        glow_core.load(split, backend=interpreter)


def test_kinds_glow_has_no_form_for_are_refused(interpreter: str) -> None:
    map_type = helper.make_map_type_proto(TensorProto.STRING, tensor_type(F, []))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["m"], ["y"])],
        "maps",
        [helper.make_value_info("m", map_type)],
        [helper.make_value_info("y", map_type)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(
        UnsupportedOpError, match="input 'm' is a map; glow takes tensors, sequences of tensors"
    ):
        glow_core.load(proto, backend=interpreter)
    nested = helper.make_sequence_type_proto(sequence_type(F, [2]))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["y"])],
        "nested",
        [helper.make_value_info("s", nested)],
        [helper.make_value_info("y", nested)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOpError, match="input 's' is a sequence of sequence of tensor"):
        load_onnx(proto)


def test_a_sequence_where_a_tensor_is_needed_is_refused(interpreter: str) -> None:
    proto = model(
        [helper.make_node("SequenceConstruct", ["x"], ["s"])],
        [tensor("x", F, [2])],
        [sequence("s", F, [2])],
    )
    proto.graph.node.append(helper.make_node("Relu", ["s"], ["r"]))
    proto.graph.output.append(tensor("r", F, [2]))
    with pytest.raises(
        UnsupportedOpError, match=r"ONNX node 'r' \(Relu\): input 0 \(tensor 's'\) is a sequence"
    ):
        load_onnx(proto)


# ---- the ONNX backend interface ----------------------------------------------------------


def test_onnx_backend_passes_lists_and_none_through(interpreter: str, rng: np.random.Generator) -> None:
    backend_module = pytest.importorskip("glow_conformance.onnx_backend")
    proto = model(
        [
            helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
            helper.make_node("SequenceInsert", ["xs", "x"], ["ys"]),
        ],
        [optional("maybe", tensor_type(F, [2])), sequence("xs", F, [2]), tensor("x", F, [2])],
        [tensor("has", B, []), sequence("ys", F, [2])],
    )
    rep = backend_module.GlowBackend.prepare(proto, backend=interpreter)
    xs, x = [normal(rng, 2)], normal(rng, 2)
    has, ys = rep.run([None, xs, x])
    assert has == np.array(False)
    assert_same(ys, [*xs, x], "ys")
    has, _ = rep.run([x, tuple(xs), x])
    assert has == np.array(True)


def test_a_session_given_the_element_shapes_compiles_at_once(
    interpreter: str, rng: np.random.Generator
) -> None:
    proto = model(
        [helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
        [sequence("xs", F, [None]), tensor("x", F, [None])],
        [tensor("y", F, [None])],
    )
    eager = glow_core.load(proto, backend=interpreter, input_shapes={"xs": [[2], [3]], "x": [1]})
    assert eager.stats.compilations == 1
    xs = [normal(rng, 2), normal(rng, 3)]
    np.testing.assert_array_equal(eager.run({"xs": xs, "x": normal(rng, 1)})["y"], np.concatenate(xs))
    assert eager.stats.compilations == 1 and eager.stats.cache_hits == 1
    lazy = glow_core.load(proto, backend=interpreter, input_shapes={"x": [1]})  # the length comes with a call
    assert lazy.stats.compilations == 0
