"""Building tiny ONNX models and checking glow's loader on them, shared by the ONNX tests.

``check`` loads a model with ``load_onnx``, evaluates the glow graph with the primitives'
references, and compares every output with onnxruntime (``ort``, one thread) or
``onnx.reference`` (``ref``) by ``glow_core.accuracy.relative_error``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glow_core.accuracy import onnxruntime_outputs, relative_error
from glow_core.frontends.onnx import load_onnx
from glow_core.graph.function import Module
from glow_core.lowering.evaluate import evaluate

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape), dtype=np.float32)


def positive(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return np.asarray(np.abs(rng.standard_normal(shape)) + 0.1, dtype=np.float32)


def ints(rng: np.random.Generator, low: int, high: int, *shape: int, dtype: Any = np.int64) -> np.ndarray:
    return rng.integers(low, high, shape).astype(dtype)


def model_of(
    nodes: Sequence[onnx.NodeProto],
    feeds: Mapping[str, np.ndarray],
    outputs: Mapping[str, int] | Sequence[str] = ("y",),
    inits: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A model whose inputs are typed like ``feeds``; outputs are float unless typed."""
    typed = outputs if isinstance(outputs, Mapping) else dict.fromkeys(outputs, F)
    graph = helper.make_graph(
        list(nodes),
        "test",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info(n, t, None) for n, t in typed.items()],
        initializer=[numpy_helper.from_array(v, n) for n, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8
    return model


def one(op: str, ins: Sequence[str], feeds: Mapping[str, np.ndarray], **kw: Any) -> onnx.ModelProto:
    """A one-node model; ``kw`` holds node attributes plus outputs/inits/opset."""
    opts = {k: kw.pop(k) for k in ("outputs", "inits", "opset") if k in kw}
    outs = list(opts.get("outputs", ("y",)))
    node = helper.make_node(op, list(ins), outs, name=f"{op.lower()}_node", **kw)
    return model_of([node], feeds, **opts)


def reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], engine: str) -> dict[str, np.ndarray]:
    """The outputs of ``model`` from onnxruntime (``ort``) or onnx.reference (``ref``)."""
    if engine == "ort":
        return onnxruntime_outputs(model, feeds)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(names, dict(feeds)), strict=True))


def check(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    engines: Sequence[str] = ("ort",),
    tol: float = 1e-5,
    static: Sequence[str] = (),
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Module:
    """Load + evaluate ``model`` and compare every output with each reference engine.

    ``static`` names inputs bound at load time (shape specialization).
    """
    fixed = {k: v for k, v in feeds.items() if k in static}
    module = load_onnx(model, input_shapes, static_inputs=fixed)
    got = evaluate(module, {k: v for k, v in feeds.items() if k not in static and k in module.placeholders})
    for engine in engines:
        for name, want in reference(model, feeds, engine).items():
            want = np.asarray(want)
            assert got[name].shape == want.shape, (engine, name, got[name].shape, want.shape)
            assert got[name].dtype == want.dtype, (engine, name, got[name].dtype, want.dtype)
            if want.dtype.kind == "f":
                err = relative_error(np.nan_to_num(got[name]), np.nan_to_num(want))
                assert np.array_equal(np.isnan(got[name]), np.isnan(want)), (engine, name)
                assert err < tol, (engine, name, err)
            else:
                np.testing.assert_array_equal(got[name], want, err_msg=f"{engine} {name}")
    return module


def kinds(module: Module) -> list[str]:
    return [n.kind for n in module.function.nodes]
