"""ONNX sequences and optionals: load-time structure, lists and None at the Session's edges.

Every model is built with onnx.helper and checked against onnx.reference on seeded random
inputs (optional outputs against numpy, since onnx.reference wraps optionals its own way),
on the interpreter and, where it is installed, the cpu backend. The error paths check that
what glow cannot take is refused with a message naming the input or node
(test_onnx_sequences_edges.py, with the loader's view and the ONNX backend interface).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from installed_backends import install_backend
from onnx import helper
from sequence_cases import (
    I64,
    B,
    F,
    assert_same,
    check,
    model,
    normal,
    optional,
    sequence,
    sequence_type,
    tensor,
    tensor_type,
)

import glow_core
from glow_core.frontends.onnx import LoadTimeValueError, load_onnx
from glow_core.runtime import SpecializationError


@pytest.fixture(params=["interpreter", "cpu"])
def backend(request: pytest.FixtureRequest, install_registry) -> str:
    """Each backend by name (skipped when its plugin or device is missing)."""
    return install_backend(install_registry, request.param)


# ---- sequences ---------------------------------------------------------------------------


def test_sequence_ops_build_and_edit_lists_at_load_time(backend: str, rng: np.random.Generator) -> None:
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s1"]),
        helper.make_node("SequenceInsert", ["s1", "c", "front"], ["s2"]),
        helper.make_node("SequenceInsert", ["s2", "a"], ["s3"]),
        helper.make_node("SequenceErase", ["s3", "minus_two"], ["s4"]),
        helper.make_node("SequenceAt", ["s4", "minus_one"], ["last"]),
        helper.make_node("Mul", ["last", "b"], ["product"]),
        helper.make_node("SequenceLength", ["s4"], ["length"]),
        helper.make_node("ConcatFromSequence", ["s4"], ["joined"], axis=1),
        helper.make_node("ConcatFromSequence", ["s4"], ["stacked"], axis=-1, new_axis=1),
    ]
    inits = {"front": np.array(0, np.int64), "minus_two": np.array(-2, np.int64), "minus_one": np.array(-1)}
    proto = model(
        nodes,
        [tensor(n, F, [2, 3]) for n in "abc"],
        [sequence("s4"), tensor("product"), tensor("length", I64), tensor("joined"), tensor("stacked")],
        inits,
    )
    calls = [{n: normal(rng, 2, 3) for n in "abc"} for _ in range(2)]
    check(proto, calls, backend)


def test_sequence_inputs_respecialize_per_length_and_shapes(backend: str, rng: np.random.Generator) -> None:
    """SequenceMap's body runs once per element; a new length or element shape is a new specialization."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["item", "item"], ["square"]),
            helper.make_node("Add", ["square", "shift"], ["out"]),
        ],
        "body",
        [tensor("item", F, ["n"]), tensor("shift", F, [1])],
        [tensor("out", F, ["n"])],
    )
    proto = model(
        [
            helper.make_node("SequenceMap", ["xs", "bias"], ["ys"], body=body),
            helper.make_node("SequenceLength", ["xs"], ["count"]),
        ],
        [sequence("xs", F, ["n"]), tensor("bias", F, [1])],
        [sequence("ys", F, ["n"]), tensor("count", I64)],
    )
    lengths = [[3, 5], [4, 4, 2], [3, 5]]
    calls = [{"xs": [normal(rng, n) for n in sizes], "bias": normal(rng, 1)} for sizes in lengths]
    session = check(proto, calls, backend)
    assert session.stats.compilations == 2 and session.stats.cache_hits == 1
    empty = session.run({"xs": [], "bias": normal(rng, 1)})  # onnx.reference cannot map an empty one
    assert empty["ys"] == [] and empty["count"] == np.array(0)


def test_sequence_map_takes_tensors_and_sequences_and_returns_several(
    backend: str, rng: np.random.Generator
) -> None:
    body = helper.make_graph(
        [helper.make_node("Sub", ["x", "y"], ["d"]), helper.make_node("Shape", ["x"], ["s"])],
        "body",
        [tensor("x", F, ["n"]), tensor("y", F, [1])],
        [tensor("d", F, ["n"]), tensor("s", I64, [1])],
    )
    proto = model(
        [helper.make_node("SequenceMap", ["xs", "ys"], ["ds", "shapes"], body=body)],
        [sequence("xs", F, ["n"]), sequence("ys", F, [1])],
        [sequence("ds", F, ["n"]), sequence("shapes", I64, [1])],
    )
    calls = [{"xs": [normal(rng, 2), normal(rng, 6)], "ys": [normal(rng, 1), normal(rng, 1)]}]
    check(proto, calls, backend)


@pytest.mark.parametrize(
    ("split", "attrs", "shape"),
    [
        (np.array(2, np.int64), {"axis": 1}, (3, 7)),  # equal pieces and a shorter last one
        (np.array([1, 3, 2], np.int64), {"axis": -2}, (6, 2)),
        (None, {"axis": 0, "keepdims": 0}, (4, 3)),
        (None, {"axis": 1}, (2, 3)),
    ],
)
def test_split_to_sequence(interpreter: str, rng: np.random.Generator, split, attrs, shape) -> None:
    inputs = ["x"] if split is None else ["x", "split"]
    proto = model(
        [
            helper.make_node("SplitToSequence", inputs, ["pieces"], **attrs),
            helper.make_node("ConcatFromSequence", ["pieces"], ["back"], axis=attrs["axis"]),
        ],
        [tensor("x", F, list(shape))],
        [sequence("pieces"), tensor("back")],
        {} if split is None else {"split": split},
    )
    if attrs.get("keepdims", 1) == 0:  # the axis is gone: concatenating along it would not invert the split
        proto.graph.output.pop()
        proto.graph.node.pop()
    check(proto, [{"x": normal(rng, *shape)}], interpreter)


def test_split_to_sequence_of_a_constant_stays_a_load_time_value(interpreter: str) -> None:
    """Pieces of a constant are arrays, so a shape taken from one is known while loading."""
    table = np.array([[3, 2, 0, 0], [2, 3, 9, 9]], np.int64)
    proto = model(
        [
            helper.make_node("SplitToSequence", ["table"], ["rows"], axis=0, keepdims=0),
            helper.make_node("SequenceAt", ["rows", "one"], ["row"]),
            helper.make_node("Slice", ["row", "zero", "two"], ["row_shape"]),
            helper.make_node("Reshape", ["x", "row_shape"], ["y"]),
        ],
        [tensor("x", F, [3, 2])],
        [tensor("y")],
        {"table": table, "one": np.array(1, np.int64), "zero": np.array([0]), "two": np.array([2])},
    )
    check(proto, [{"x": np.arange(6, dtype=np.float32).reshape(3, 2) + 1}], interpreter)
    assert [n.kind for n in load_onnx(proto).function.nodes] == ["Reshape", "Save"]


def test_positions_given_as_inputs_are_static_per_call(backend: str, rng: np.random.Generator) -> None:
    proto = model(
        [
            helper.make_node("SequenceInsert", ["xs", "item", "where"], ["inserted"]),
            helper.make_node("SequenceAt", ["inserted", "where"], ["picked"]),
        ],
        [sequence("xs", F, [2]), tensor("item", F, [2]), tensor("where", I64, [])],
        [sequence("inserted", F, [2]), tensor("picked", F, [2])],
    )
    xs = [normal(rng, 2) for _ in range(3)]
    calls = [{"xs": xs, "item": normal(rng, 2), "where": np.array(w, np.int64)} for w in (0, -1, 2, 0)]
    session = check(proto, calls, backend)
    assert session.stats.compilations == 3 and session.stats.cache_hits == 1
    # Position n appends (the spec's range is [-n, n]); onnx.reference wraps it to the front.
    item = normal(rng, 2)
    results = session.run({"xs": xs, "item": item, "where": np.array(3, np.int64)})
    assert_same(results["inserted"], [*xs, item], "inserted")


def test_a_sequence_input_needed_at_load_time_becomes_static(backend: str, rng: np.random.Generator) -> None:
    """A shape read from an element of a sequence input makes the whole sequence static for the call."""
    proto = model(
        [
            helper.make_node("SequenceAt", ["shapes", "zero"], ["target"]),
            helper.make_node("Reshape", ["x", "target"], ["y"]),
        ],
        [tensor("x", F, [6]), sequence("shapes", I64, [2])],
        [tensor("y")],
        {"zero": np.array(0, np.int64)},
    )
    calls = [
        {"x": normal(rng, 6), "shapes": [np.array(s, np.int64), np.array([1, 6], np.int64)]}
        for s in ([2, 3], [3, 2], [2, 3])
    ]
    session = check(proto, calls, backend)
    assert session.stats.compilations == 2 and session.stats.cache_hits == 1


def test_a_position_computed_from_data_is_probed(backend: str, rng: np.random.Generator) -> None:
    """load_onnx refuses a position computed at run time; a session computes it per call."""
    proto = model(
        [
            helper.make_node("ArgMax", ["scores"], ["best"], keepdims=0),
            helper.make_node("SequenceAt", ["xs", "best"], ["y"]),
        ],
        [sequence("xs", F, [3]), tensor("scores", F, [4])],
        [tensor("y", F, [3])],
    )
    xs = [normal(rng, 3) for _ in range(4)]
    with pytest.raises(LoadTimeValueError, match="position"):
        load_onnx(proto, input_shapes={"xs": [[3]] * 4})
    calls = [{"xs": xs, "scores": normal(rng, 4)} for _ in range(3)]
    check(proto, calls, backend)


def test_a_loop_grows_a_carried_sequence(backend: str, rng: np.random.Generator) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["i_float"], to=F),
            helper.make_node("Mul", ["x", "i_float"], ["scaled"]),
            helper.make_node("SequenceInsert", ["seq_in", "scaled"], ["seq_out"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("cond_in", B, []), sequence("seq_in", F, [3])],
        [tensor("cond_out", B, []), sequence("seq_out", F, [3])],
    )
    proto = model(
        [
            helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
            helper.make_node("Loop", ["trips", "true", "empty"], ["grown"], body=body),
            helper.make_node("ConcatFromSequence", ["grown"], ["stacked"], axis=0, new_axis=1),
        ],
        [tensor("x", F, [3]), tensor("trips", I64, [])],
        [sequence("grown", F, [3]), tensor("stacked", F, [None, 3])],
        {"true": np.array(True)},
    )
    calls = [{"x": normal(rng, 3), "trips": np.array(n, np.int64)} for n in (3, 1, 3)]
    session = check(proto, calls, backend)
    assert session.stats.cache_hits == 1


def test_sequence_outputs_of_if_branches(backend: str, rng: np.random.Generator) -> None:
    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [
                helper.make_node(op, ["x", "x"], ["t"]),
                helper.make_node("SequenceConstruct", ["t", "x"], ["s"]),
            ],
            op,
            [],
            [sequence("s", F, [2])],
        )

    proto = model(
        [
            helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            helper.make_node("Greater", ["total", "zero"], ["positive"]),
            helper.make_node(
                "If", ["positive"], ["out"], then_branch=branch("Mul"), else_branch=branch("Sub")
            ),
        ],
        [tensor("x", F, [2])],
        [sequence("out", F, [2])],
        {"zero": np.array(0.0, np.float32)},
    )
    x = normal(rng, 2)
    check(proto, [{"x": np.abs(x)}, {"x": -np.abs(x)}], backend)


# ---- optionals ---------------------------------------------------------------------------


def test_optional_inputs_take_none(backend: str, rng: np.random.Generator) -> None:
    """An optional input is absent (None) or present; an If on OptionalHasElement resolves at load time."""
    then = helper.make_graph(
        [
            helper.make_node("OptionalGetElement", ["maybe"], ["got"]),
            helper.make_node("Add", ["got", "x"], ["t"]),
        ],
        "then",
        [],
        [tensor("t", F, [3])],
    )
    otherwise = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [tensor("e", F, [3])])
    proto = model(
        [
            helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
            helper.make_node("If", ["has"], ["y"], then_branch=then, else_branch=otherwise),
            helper.make_node("Identity", ["maybe"], ["echo"]),
        ],
        [tensor("x", F, [3]), optional("maybe", tensor_type(F, [3]))],
        [tensor("has", B, []), tensor("y", F, [3]), optional("echo", tensor_type(F, [3]))],
    )
    session = glow_core.load(proto, backend=backend)
    x, maybe = normal(rng, 3), normal(rng, 3)
    present = session.run({"x": x, "maybe": maybe})
    assert present["has"] == np.array(True) and present["echo"] is not None
    np.testing.assert_allclose(present["y"], maybe + x, rtol=1e-6)
    np.testing.assert_array_equal(present["echo"], maybe)
    absent = session.run({"x": x, "maybe": None})
    assert absent["has"] == np.array(False) and absent["echo"] is None
    np.testing.assert_array_equal(absent["y"], -x)


def test_optional_sequences_and_empty_optional_outputs(backend: str, rng: np.random.Generator) -> None:
    empty = helper.make_graph(
        [helper.make_node("Optional", [], ["none"], type=sequence_type(F, [2]))],
        "empty",
        [],
        [optional("none", sequence_type(F, [2]))],
    )
    wrapped = helper.make_graph(
        [helper.make_node("Optional", ["xs"], ["some"])],
        "wrapped",
        [],
        [optional("some", sequence_type(F, [2]))],
    )
    proto = model(
        [
            helper.make_node("If", ["flag"], ["out"], then_branch=empty, else_branch=wrapped),
            helper.make_node("OptionalGetElement", ["maybe_xs"], ["unwrapped"]),
        ],
        [sequence("xs", F, [2]), tensor("flag", B, []), optional("maybe_xs", sequence_type(F, [2]))],
        [optional("out", sequence_type(F, [2])), sequence("unwrapped", F, [2])],
    )
    session = glow_core.load(proto, backend=backend)
    xs, ys = [normal(rng, 2) for _ in range(2)], [normal(rng, 2) for _ in range(3)]
    results = session.run({"xs": xs, "flag": np.array(False), "maybe_xs": ys})
    assert_same(results["out"], xs, "out")
    assert_same(results["unwrapped"], ys, "unwrapped")
    results = session.run({"xs": xs, "flag": np.array(True), "maybe_xs": ys})
    assert results["out"] is None
    with pytest.raises(SpecializationError, match="optional is empty"):
        session.run({"xs": xs, "flag": np.array(True), "maybe_xs": None})
