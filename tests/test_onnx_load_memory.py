"""The ONNX import's handling of weights (issue 20, item 4): every element type the loader
takes comes out bit for bit whatever the source (a file, bytes, a ModelProto) and however the
file stores it (``raw_data`` or the typed field), and a caller's ModelProto is never modified,
so any change that releases a loaded model's bytes early is checked against both."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.frontends.onnx import load_onnx
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
