"""Load-time constant folding of ONNX nodes whose inputs are all known.

Exporters (PyTorch above all) emit shape subgraphs: ``Shape -> Gather -> Unsqueeze ->
Concat -> Reshape``. With static shapes every value there is known while loading, so
instead of importing each op twice (once as graph nodes, once as numpy) the node is run
once, as ONNX itself defines it, by ``onnx.reference`` on its load-time inputs. One helper
serves every foldable op; the importer table says which ops may be folded.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.registry import FoldPolicy, Value


def can_fold(policy: FoldPolicy, inputs: list[Value]) -> bool:
    """Whether a node with ``inputs`` (the given ones) may be computed at load time."""
    if policy is None or not inputs or not all(isinstance(v, np.ndarray) for v in inputs):
        return False
    if policy == "int":
        return all(v.dtype.kind in "iub" for v in inputs)  # type: ignore[union-attr]
    return True


def fold_node(node: onnx.NodeProto, values: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """Outputs of ``node`` computed from the load-time ``values`` of its inputs.

    Raises ShapeError (the loader adds the node's name) when ONNX itself rejects the
    inputs, which for a constant subgraph means the model is inconsistent.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = ReferenceEvaluator(_one_node_model(node, values, opset))
            results = session.run(None, {name: values[name] for name in node.input if name})
    except Exception as err:  # onnx.reference raises plain Python/numpy errors
        text = " ".join(str(err).split())
        raise ShapeError(f"computing it at load time failed: {type(err).__name__}: {text}") from None
    return [np.asarray(r) for r in results]


def _one_node_model(node: onnx.NodeProto, values: dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    """``node`` wrapped in a model importing ``opset``: onnx.reference given a bare node runs
    the newest version of the op, whose inputs and attributes may differ (Unsqueeze-11's axes)."""
    names = list(dict.fromkeys(name for name in node.input if name))
    inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(values[name].dtype), values[name].shape
        )
        for name in names
    ]
    outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
