"""The ONNX import's handling of weights (issue 20, item 4): every element type the loader
takes comes out bit for bit whatever the source (a file, bytes, a ModelProto) and however the
file stores it (``raw_data`` or the typed field), and a caller's ModelProto is never modified,
so any change that releases a loaded model's bytes early is checked against both."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import ModelLoadError
from glow_core.frontends.onnx import load_onnx
from glow_core.frontends.onnx.deferred import model_for_import
from glow_core.frontends.onnx.wire import BytesSource, split_initializers
from glow_core.lowering.evaluate import evaluate

_KINDS = {
    "f32": np.float32,
    "f16": np.float16,
    "f64": np.float64,
    "i8": np.int8,
    "u8": np.uint8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "bool": np.bool_,
}
"""Weights of each element type the tests load (name prefix: numpy type)."""


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One random array per element type, never all zeros (an empty load would pass)."""
    out = {}
    for name, dtype in _KINDS.items():
        if dtype == np.bool_:
            out[name] = rng.random((3, 5)) < 0.5
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            out[name] = rng.integers(info.min, info.max, size=(3, 5), endpoint=True, dtype=dtype)
        else:
            out[name] = (rng.standard_normal((3, 5)) * 100).astype(dtype)
    return out


def _tensor(name: str, array: np.ndarray, raw: bool) -> TensorProto:
    """``array`` as an initializer in ``raw_data`` or in its typed field (float16 in int32_data)."""
    if raw:
        return numpy_helper.from_array(array, name)
    data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    tensor = helper.make_tensor(name, data_type, array.shape, array.flatten().tolist())
    assert not tensor.HasField("raw_data")  # make_tensor stores float16 as bits in int32_data
    return tensor


def _identity_model(weights: dict[str, np.ndarray], raw: bool) -> onnx.ModelProto:
    """Each weight an initializer returned through an Identity node (``y_<name>``)."""
    inits = [_tensor(f"w_{n}", a, raw) for n, a in weights.items()]
    nodes = [helper.make_node("Identity", [f"w_{n}"], [f"y_{n}"]) for n in weights]
    outputs = [
        helper.make_tensor_value_info(f"y_{n}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in weights.items()
    ]
    graph = helper.make_graph(nodes, "weights", [], outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
@pytest.mark.parametrize("source", ["path", "bytes", "proto"])
def test_weights_of_every_type_load_bit_exactly(tmp_path, rng, raw, source) -> None:
    weights = _weights(rng)
    model = _identity_model(weights, raw)
    path = tmp_path / "weights.onnx"
    onnx.save(model, path)
    given = {"path": path, "bytes": path.read_bytes(), "proto": model}[source]
    results = evaluate(load_onnx(given), {})
    for name, expected in weights.items():
        got = np.asarray(results[f"y_{name}"])
        assert got.dtype == expected.dtype, name
        assert got.shape == expected.shape, name
        assert got.tobytes() == expected.tobytes(), name


def test_a_callers_model_proto_is_never_modified(rng, registry) -> None:
    """Compiling and loading from a ModelProto leave it as it was, field for field."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"])],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[numpy_helper.from_array(w, "w"), _tensor("b", b, raw=False)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = proto.SerializeToString(deterministic=True)
    expected = x.astype(np.float64) @ w + b
    compiled = glow_core.compile(proto)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], expected, rtol=1e-5)
    session = glow_core.load(proto)
    np.testing.assert_allclose(session.run({"x": x})["y"], expected, rtol=1e-5)
    assert proto.SerializeToString(deterministic=True) == before
    assert len(proto.graph.initializer[0].raw_data) == w.nbytes
    assert list(proto.graph.initializer[1].float_data) == b.tolist()


def test_split_initializers_keeps_everything_else(rng) -> None:
    """The split model plus its initializers, parsed from their spans, is the model itself."""
    weights = _weights(rng)
    model = _identity_model(weights, raw=True)
    model.graph.initializer.append(_tensor("w_typed", weights["f32"], raw=False))
    model.doc_string = "after the graph"
    data = model.SerializeToString()
    split = split_initializers(BytesSource(data))
    rebuilt = onnx.ModelProto.FromString(split.model)
    assert not rebuilt.graph.initializer and rebuilt.graph.node
    for offset, size in split.initializers:
        rebuilt.graph.initializer.add().ParseFromString(data[offset : offset + size])
    assert rebuilt == model


def test_a_folder_or_missing_file_is_refused_as_before(tmp_path) -> None:
    for path in (tmp_path, tmp_path / "missing.onnx"):
        with pytest.raises(ModelLoadError, match="does not exist or is not a file"):
            load_onnx(path)


@pytest.mark.parametrize("cut", [1, 7, 100])
def test_truncated_bytes_are_refused_as_before(rng, cut) -> None:
    """Framing the splitter refuses falls back to parsing the model whole, so the error is the
    parser's (or, where the cut still parses, the checks')."""
    data = _identity_model(_weights(rng), raw=True).SerializeToString()
    with pytest.raises(ModelLoadError):
        load_onnx(data[:-cut])


def test_old_opset_and_shared_names_from_a_file_load_whole(tmp_path, rng) -> None:
    """Models the deferred reading leaves to the whole parse still load from a file: an opset
    older than 7 (the version converter needs the real tensors) and repeated initializer names."""
    x = rng.standard_normal(3).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    onnx.save(old, tmp_path / "old.onnx")
    np.testing.assert_allclose(evaluate(load_onnx(tmp_path / "old.onnx"), {"x": x})["y"], x + w, rtol=1e-6)
    shared = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    shared.graph.initializer.insert(0, numpy_helper.from_array(-w, "w"))
    onnx.save(shared, tmp_path / "shared.onnx")
    expected = evaluate(load_onnx(shared), {"x": x})["y"]  # the whole parse decides which "w" wins
    np.testing.assert_array_equal(evaluate(load_onnx(tmp_path / "shared.onnx"), {"x": x})["y"], expected)


_PEAK_CHILD = """
import sys
import numpy as np
from glow_core.frontends.onnx import load_onnx
from glow_core.frontends.onnx.deferred import model_for_import

def peak_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024

source = sys.argv[1] if sys.argv[2] == "path" else open(sys.argv[1], "rb").read()
before = peak_mb()
module = load_onnx(source)
print(peak_mb() - before)
"""


@pytest.mark.parametrize("source", ["path", "bytes"])
def test_import_holds_the_weights_once(tmp_path, rng, source) -> None:
    """Peak resident memory of an import, in a fresh process, over the weights' size (a
    caller's bytes are resident before): each weight is read when its array is made. The
    whole parse held the file's bytes beside the parsed model, then the parsed model beside
    the arrays: twice the weights (bytes: the parsed model beside the arrays)."""
    blocks = [rng.standard_normal((1024, 4096)).astype(np.float32) for _ in range(4)]
    weights_mb = sum(b.nbytes for b in blocks) / 2**20
    inits = [numpy_helper.from_array(b, f"w{i}") for i, b in enumerate(blocks)]
    nodes = [helper.make_node("Identity", [f"w{i}"], [f"y{i}"]) for i in range(len(blocks))]
    outputs = [
        helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, b.shape) for i, b in enumerate(blocks)
    ]
    graph = helper.make_graph(nodes, "big", [], outputs, initializer=inits)
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    del inits, graph
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD, str(path), source], check=True, capture_output=True, text=True
    )
    grown = float(out.stdout.split()[-1])
    assert grown < 1.5 * weights_mb, (grown, weights_mb)


def test_a_file_cut_while_loading_is_refused(tmp_path, rng) -> None:
    """The weights are read again when their arrays are made: a file cut in between is a
    ModelLoadError naming the initializer, not an OSError or a wrong array."""
    model = _identity_model(_weights(rng), raw=True)
    path = tmp_path / "weights.onnx"
    onnx.save(model, path)
    with model_for_import(path, None, 7) as (proto, _, weights):
        assert weights is not None
        name = proto.graph.initializer[-1].name
        with open(path, "r+b") as file:
            file.truncate(10)
        with pytest.raises(ModelLoadError, match=rf"initializer '{name}': cannot read it again"):
            weights.array(name, f"initializer {name!r}")
