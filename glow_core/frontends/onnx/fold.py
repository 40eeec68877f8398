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
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.registry import FoldPolicy, Value
from glow_core.limits import current_limits

_SHAPE_ARGUMENT_SIZE = 64


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
    inputs, which for a constant subgraph means the model is inconsistent, and
    MemoryLimitError before running it when an output would be over the per-tensor budget
    (``ConstantOfShape`` of ``[2**40]`` asks for 4 TiB in a few bytes).
    """
    model = _one_node_model(node, values, opset)
    limits = current_limits()
    for name, (shape, itemsize) in _predicted_outputs(model).items():
        limits.check_tensor(f"output {name!r}, computed at load time,", shape, itemsize)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = ReferenceEvaluator(model)
            results = session.run(None, {name: values[name] for name in node.input if name})
    except Exception as err:  # onnx.reference raises plain Python/numpy errors
        text = " ".join(str(err).split())
        raise ShapeError(f"computing it at load time failed: {type(err).__name__}: {text}") from None
    arrays = [np.asarray(r) for r in results]
    for name, array in zip(node.output, arrays, strict=False):  # what inference could not predict
        limits.check_tensor(f"output {name!r}, computed at load time,", array.shape, array.dtype.itemsize)
    return arrays


def _predicted_outputs(model: onnx.ModelProto) -> dict[str, tuple[list[int], int]]:
    """Shape and item size of each output of the one-node ``model`` that onnx's shape
    inference can tell without running it (small inputs are initializers there, so shape
    arguments count); outputs it cannot tell, or finds inconsistent, are left out."""
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return {}  # running the node reports the inconsistency itself
    predicted = {}
    for info in inferred.graph.output:
        tensor = info.type.tensor_type
        if not tensor.HasField("shape") or not tensor.elem_type:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        if all(d >= 0 for d in dims) and tensor.elem_type != TensorProto.STRING:
            predicted[info.name] = (dims, helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize)
    return predicted


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
    # Small inputs (shapes, repeats, pads) also as initializers: shape inference reads their
    # values; large ones (weights) are never shape arguments and would only be copied.
    shape_args = [
        numpy_helper.from_array(values[name], name)
        for name in names
        if values[name].size <= _SHAPE_ARGUMENT_SIZE and values[name].dtype.kind in "iub"
    ]
    outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
    graph = helper.make_graph([node], "fold", inputs, outputs, initializer=shape_args)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
