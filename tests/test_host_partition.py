"""The host partition of glow_core.load: string and image ops run in numpy around compiled parts.

Each model is built with onnx.helper and compared with onnx.reference on seeded inputs that
differ per test; models with a compiled part run on the interpreter and the cpu backend.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import onnx
import pytest
from installed_backends import install_backend
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.errors import InputError, UnsupportedOpError

F, I64, S, B, U8 = (
    TensorProto.FLOAT,
    TensorProto.INT64,
    TensorProto.STRING,
    TensorProto.BOOL,
    TensorProto.UINT8,
)
ML = "ai.onnx.ml"


@pytest.fixture(params=["interpreter", "cpu"])
def backend(request: pytest.FixtureRequest, install_registry) -> str:
    """Each backend by name (skipped when its plugin or device is missing)."""
    return install_backend(install_registry, request.param)


def _model(nodes, inputs, outputs, inits=(), opset: int = 20, ml: int | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=list(inits),
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(ML, ml)] if ml else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _words(
    rng: np.random.Generator, shape: tuple[int, ...], letters: str = "abcAB", longest: int = 5
) -> np.ndarray:
    flat = [
        "".join(rng.choice(list(letters), size=int(rng.integers(1, longest + 1))))
        for _ in range(int(np.prod(shape)))
    ]
    out = np.empty(shape, dtype=object)
    out[...] = np.asarray(flat, dtype=object).reshape(shape)
    return out


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> dict[str, np.ndarray]:
    """Run a glow session and onnx.reference on ``feeds``; every output must agree."""
    got = glow_core.load(model, backend=backend).run(feeds)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for value, want in zip(model.graph.output, expected, strict=True):
        actual, want = got[value.name], np.asarray(want)
        assert actual.shape == want.shape, value.name
        if want.dtype.kind in "OUS":
            assert actual.dtype == object, value.name
            assert actual.tolist() == want.astype(object).tolist(), value.name
        elif want.dtype.kind == "f":
            np.testing.assert_allclose(actual, want, rtol=1e-6, err_msg=value.name)
        else:
            assert actual.dtype == want.dtype, value.name
            np.testing.assert_array_equal(actual, want, err_msg=value.name)
    return got


# ---- each host op against onnx.reference --------------------------------------------------


def test_string_concat_broadcasts(interpreter, rng):
    model = _model(
        [helper.make_node("StringConcat", ["x", "y"], ["z"])], [("x", S, [3, 4]), ("y", S, [4])], [("z", S)]
    )
    _check(model, {"x": _words(rng, (3, 4)), "y": _words(rng, (4,), "xyz的")}, interpreter)


@pytest.mark.parametrize(("delimiter", "maxsplit"), [(None, None), ("-", None), ("-", 1), ("", 2)])
def test_string_split_pads_to_the_longest(interpreter, rng, delimiter, maxsplit):
    attrs = {k: v for k, v in (("delimiter", delimiter), ("maxsplit", maxsplit)) if v is not None}
    node = helper.make_node("StringSplit", ["x"], ["parts", "counts"], **attrs)
    model = _model([node], [("x", S, [2, 3])], [("parts", S), ("counts", I64)])
    _check(model, {"x": _words(rng, (2, 3), "ab- ", longest=9)}, interpreter)


@pytest.mark.parametrize(
    ("action", "sensitive", "shape"), [("LOWER", 0, [6]), ("UPPER", 1, [1, 6]), ("NONE", 0, [6])]
)
def test_string_normalizer_drops_stop_words_then_changes_case(interpreter, rng, action, sensitive, shape):
    x = _words(rng, tuple(shape), "aAb", longest=2)
    stops = [str(x.reshape(-1)[0]).swapcase(), "bb"]
    node = helper.make_node(
        "StringNormalizer",
        ["x"],
        ["y"],
        case_change_action=action,
        is_case_sensitive=sensitive,
        stopwords=stops,
    )
    _check(_model([node], [("x", S, shape)], [("y", S)], opset=10), {"x": x}, interpreter)


def test_string_normalizer_that_drops_everything_returns_one_empty_string(interpreter):
    node = helper.make_node("StringNormalizer", ["x"], ["y"], stopwords=["a"])
    session = glow_core.load(_model([node], [("x", S, [1, 2])], [("y", S)], opset=10), backend=interpreter)
    got = session.run({"x": np.array([["a", "A"]], dtype=object)})["y"]
    assert got.shape == (1, 1) and got[0, 0] == ""


def test_regex_full_match(interpreter, rng):
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"[ab]+\d?[A-Z]*")
    model = _model([node], [("x", S, [4, 5])], [("y", B)])
    _check(model, {"x": _words(rng, (4, 5), "ab1A", longest=4)}, interpreter)


def test_regex_full_match_speaks_re2(interpreter):
    """RE2's character classes and end of text, which Python's re spells differently."""
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"[[:upper:]][[:digit:]_]*\w\z")
    session = glow_core.load(_model([node], [("x", S, [5])], [("y", B)]), backend=interpreter)
    x = np.array(["A1_b", "a1b", "B", "B_\n", "Cé"], dtype=object)
    np.testing.assert_array_equal(session.run({"x": x})["y"], [True, False, False, False, False])


def test_equal_on_strings_broadcasts(interpreter, rng):
    model = _model(
        [helper.make_node("Equal", ["x", "y"], ["z"])], [("x", S, [3, 4]), ("y", S, [1, 4])], [("z", B)]
    )
    x = _words(rng, (3, 4), "ab", longest=2)
    _check(model, {"x": x, "y": x[1:2].copy()}, interpreter)


@pytest.mark.parametrize("form", ["lists", "tensors"])
def test_label_encoder_string_keys(interpreter, rng, form):
    keys, values = ["a", "b", "ab", "ba"], rng.integers(-50, 50, 4)
    if form == "lists":
        attrs = {"keys_strings": keys, "values_int64s": values.tolist(), "default_int64": 7}
        out = I64
    else:
        attrs = {
            "keys_tensor": helper.make_tensor("k", S, [4], keys),
            "values_tensor": helper.make_tensor("v", F, [4], values.astype(np.float32)),
            "default_tensor": helper.make_tensor("d", F, [1], [0.5]),
        }
        out = F
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    model = _model([node], [("x", S, [3, 3])], [("y", out)], ml=4)
    _check(model, {"x": _words(rng, (3, 3), "ab", longest=2)}, interpreter)


def test_label_encoder_numbers_to_strings(interpreter, rng):
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain=ML,
        keys_int64s=[0, 1, 2],
        values_strings=["cat", "dog", "bird"],
        default_string="?",
    )
    model = _model([node], [("x", I64, [7])], [("y", S)], ml=2)
    _check(model, {"x": rng.integers(-1, 4, 7)}, interpreter)


def test_image_decoder(interpreter, rng):
    image = pytest.importorskip("PIL.Image")
    pixels = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    image.fromarray(pixels).save(buffer, format="PNG")
    data = np.frombuffer(buffer.getvalue(), np.uint8)
    for pixel_format in ("RGB", "BGR", "Grayscale"):
        node = helper.make_node("ImageDecoder", ["data"], ["image"], pixel_format=pixel_format)
        got = _check(
            _model([node], [("data", U8, [len(data)])], [("image", U8)]), {"data": data}, interpreter
        )
        if pixel_format == "RGB":
            np.testing.assert_array_equal(got["image"], pixels)


def test_undecodable_image_data_gives_an_empty_image(interpreter):
    pytest.importorskip("PIL.Image")
    node = helper.make_node("ImageDecoder", ["data"], ["image"], pixel_format="Grayscale")
    session = glow_core.load(_model([node], [("data", U8, [4])], [("image", U8)]), backend=interpreter)
    assert session.run({"data": np.arange(4, dtype=np.uint8)})["image"].shape == (0, 0, 1)


def test_host_only_models_compile_nothing(interpreter, rng):
    model = _model([helper.make_node("StringConcat", ["x", "x"], ["y"])], [("x", S, [2])], [("y", S)])
    session = glow_core.load(model, backend=interpreter)
    session.run({"x": _words(rng, (2,))})
    assert session.stats.compilations == 0


def test_string_inputs_may_be_str_arrays_or_utf8_bytes(interpreter):
    model = _model(
        [helper.make_node("StringConcat", ["x", "y"], ["z"])], [("x", S, [2]), ("y", S, [2])], [("z", S)]
    )
    session = glow_core.load(model, backend=interpreter)
    got = session.run({"x": np.array(["a", "é"]), "y": np.array([b"b", "ü".encode()], dtype=object)})
    assert got["z"].dtype == object and got["z"].tolist() == ["ab", "éü"]
    with pytest.raises(InputError, match="input 'x' must hold strings"):
        session.run({"x": np.zeros(2, np.float32), "y": np.array(["b", "c"], dtype=object)})


# ---- numeric LabelEncoder: compiled --------------------------------------------------------


def test_numeric_label_encoder_is_compiled(backend, rng):
    keys = rng.permutation(20)[:6].astype(np.int64)
    values = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain=ML,
        keys_int64s=[*keys.tolist(), int(keys[0])],  # a repeated key: the last value wins
        values_floats=[*values.tolist(), 9.0],
        default_float=-2.0,
    )
    model = _model([node], [("x", I64, [4, 5])], [("y", F)], ml=2)
    session = glow_core.load(model, backend=backend)
    assert session.stats.compilations == 1  # no host part: compiled when opened, as before
    x = rng.integers(0, 20, (4, 5))
    got = session.run({"x": x})["y"]
    table = dict(zip(keys.tolist(), values.tolist(), strict=True)) | {int(keys[0]): 9.0}
    np.testing.assert_array_equal(
        got, np.array([table.get(v, -2.0) for v in x.reshape(-1)], np.float32).reshape(4, 5)
    )


def test_numeric_label_encoder_matches_nan_keys(backend):
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain=ML,
        keys_tensor=helper.make_tensor("k", F, [3], [1.5, float("nan"), -1.0]),
        values_tensor=helper.make_tensor("v", I64, [3], [10, 20, 30]),
    )
    session = glow_core.load(_model([node], [("x", F, [5])], [("y", I64)], ml=4), backend=backend)
    x = np.array([np.nan, -1.0, 1.5, 2.0, np.nan], np.float32)
    np.testing.assert_array_equal(session.run({"x": x})["y"], [20, 30, 10, -1, 20])


# ---- host and device together ------------------------------------------------------------


def _host_then_device() -> onnx.ModelProto:
    """Words normalized, encoded as numbers, then float math with a weight and an input."""
    nodes = [
        helper.make_node(
            "StringNormalizer", ["words"], ["clean"], case_change_action="LOWER", stopwords=["the"]
        ),
        helper.make_node(
            "LabelEncoder",
            ["clean"],
            ["ids"],
            domain=ML,
            keys_strings=["a", "b", "ab", "ba", "bb"],
            values_int64s=[1, 2, 3, 4, 5],
            default_int64=0,
        ),
        helper.make_node("Cast", ["ids"], ["idf"], to=F),
        helper.make_node("Mul", ["idf", "w"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["y"]),
        helper.make_node("Relu", ["bias"], ["positive"]),
    ]
    w = helper.make_tensor("w", F, [1], [0.25])
    return _model(
        nodes,
        [("words", S, ["C"]), ("bias", F, [1])],
        [("y", F), ("clean", S), ("positive", F)],
        [w],
        opset=17,
        ml=2,
    )


def test_host_part_feeds_a_compiled_part(backend, rng):
    model = _host_then_device()
    session = glow_core.load(model, backend=backend)
    for size in (5, 5, 7):
        words = _words(rng, (size,), "abAB", longest=2)
        words[0] = "The"
        _check(model, {"words": words, "bias": rng.standard_normal(1).astype(np.float32)}, backend)
        got = session.run({"words": words, "bias": np.ones(1, np.float32)})
        assert got["clean"].shape == (size - 1,)
    assert session.stats.compilations == 2  # one per length of the encoded words
    assert session.stats.cache_hits == 1


def test_device_then_host_then_device(backend, rng):
    """ArgMax (compiled) -> class names (host) -> back to numbers -> added to a compiled max."""
    nodes = [
        helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=0),
        helper.make_node(
            "LabelEncoder",
            ["best"],
            ["names"],
            domain=ML,
            keys_int64s=[0, 1, 2],
            values_strings=["x", "y", "z"],
        ),
        helper.make_node(
            "LabelEncoder",
            ["names"],
            ["codes"],
            domain=ML,
            keys_strings=["x", "y", "z"],
            values_floats=[10.0, 20.0, 30.0],
        ),
        helper.make_node("ReduceMax", ["x"], ["top"], axes=[1], keepdims=0),
        helper.make_node("Add", ["codes", "top"], ["y"]),
    ]
    model = _model(nodes, [("x", F, [4, 3])], [("y", F), ("names", S)], opset=17, ml=2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    _check(model, {"x": x}, backend)


# ---- refusals ------------------------------------------------------------------------------


def test_a_compiled_node_reading_strings_is_refused(interpreter):
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [("x", S, [2])], [("y", S)])
    with pytest.raises(
        UnsupportedOpError, match=r"'y' \(Identity\) reads the string tensor 'x'.*LabelEncoder"
    ):
        glow_core.load(model, backend=interpreter)


def test_a_host_op_inside_a_subgraph_is_refused(interpreter):
    body = helper.make_graph(
        [helper.make_node("StringConcat", ["s", "s"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", S, None)],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
    model = _model([node], [("c", B, []), ("s", S, [2])], [("y", S)])
    with pytest.raises(
        UnsupportedOpError, match=r"inside the (then|else)_branch of node 'y' \(If\).*move it out"
    ):
        glow_core.load(model, backend=interpreter)


def test_equal_between_strings_and_numbers_is_refused(interpreter):
    model = _model([helper.make_node("Equal", ["x", "y"], ["z"])], [("x", S, [2]), ("y", F, [2])], [("z", B)])
    with pytest.raises(UnsupportedOpError, match="string tensor with a numeric one"):
        glow_core.load(model, backend=interpreter)


def test_re2_syntax_python_lacks_is_refused(interpreter):
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"\p{Greek}+")
    with pytest.raises(UnsupportedOpError, match=r"RegexFullMatch.*\\\\p"):
        glow_core.load(_model([node], [("x", S, [2])], [("y", B)]), backend=interpreter)


def test_image_decoder_without_pillow_names_the_extra(interpreter, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now fails
    node = helper.make_node("ImageDecoder", ["data"], ["image"])
    with pytest.raises(UnsupportedOpError, match=r"Pillow.*glow-core\[images\]"):
        glow_core.load(_model([node], [("data", U8, [8])], [("image", U8)]), backend=interpreter)


def test_string_normalizer_refuses_other_shapes_at_run_time(interpreter):
    node = helper.make_node("StringNormalizer", ["x"], ["y"])
    session = glow_core.load(_model([node], [("x", S, [2, 2])], [("y", S)], opset=10), backend=interpreter)
    with pytest.raises(InputError, match=r"\[C\] or \[1, C\]"):
        session.run({"x": np.array([["a", "b"], ["c", "d"]], dtype=object)})


def test_compiling_a_string_label_encoder_points_to_load(interpreter):
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_int64s=[1], values_strings=["one"])
    with pytest.raises(UnsupportedOpError, match=r"glow_core\.load"):
        glow_core.compile(_model([node], [("x", I64, [2])], [("y", S)], ml=2), backend=interpreter)
