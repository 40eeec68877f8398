"""Building and checking the ONNX sequence/optional models of the sequence tests: value
infos and types by element kind and shape, a model from nodes, and a comparison of glow's
outputs (lists, None, tensors) with onnx.reference's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


# ---- building models ---------------------------------------------------------------------


def tensor(name: str, elem: int = F, shape: Sequence[Any] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def sequence(name: str, elem: int = F, shape: Sequence[Any] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def optional(name: str, inner: onnx.TypeProto) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def tensor_type(elem: int = F, shape: Sequence[Any] | None = None) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(elem, shape)


def sequence_type(elem: int = F, shape: Sequence[Any] | None = None) -> onnx.TypeProto:
    return helper.make_sequence_type_proto(tensor_type(elem, shape))


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    inits: Mapping[str, np.ndarray] | None = None,
    opset: int = 18,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "sequences",
        list(inputs),
        list(outputs),
        initializer=[numpy_helper.from_array(v, n) for n, v in (inits or {}).items()],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    return proto


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape) + 0.5, dtype=np.float32)


# ---- comparing ---------------------------------------------------------------------------


def assert_same(got: Any, want: Any, where: str) -> None:
    """A tensor, a list of them or None, equal in structure, dtype, shape and (closely) value."""
    if want is None:
        assert got is None, where
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), (where, type(got))
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (where, got.shape, got.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)


def check(
    proto: onnx.ModelProto, feeds_per_call: Sequence[dict[str, Any]], backend: str
) -> glow_core.runtime.Session:
    """Run every call through one session and compare each output with onnx.reference."""
    session = glow_core.load(proto, backend=backend)
    reference = ReferenceEvaluator(proto)
    names = [o.name for o in proto.graph.output]
    for feeds in feeds_per_call:
        got = session.run(feeds)
        want = reference.run(None, {n: v for n, v in feeds.items() if v is not None})
        for name, value in zip(names, want, strict=True):
            assert_same(got[name], value, name)
    return session
