"""Write a glow inference Function as an ONNX model: what ``Trainer.export_onnx`` saves.

The function is written as it is built (high-level nodes, before lowering), one ONNX node
(or a few) per glow node, with the trained values as initializers. Only what the outputs
read is written. One writer per node kind, in ``WRITERS``. A high-level node with no writer
is written as its lowering (its semantics, by definition: a Gelu becomes the Erf, Mul and
Add it lowers to), so only a primitive with no writer stops the export: refused before
anything is written, naming the node and the kind, so a model never comes out half-exported.

Opset 17: every op written here has had its current meaning since opset 13 at the latest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core.errors import UnsupportedOpError
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.lowering.lower import lower_function

OPSET = 17


class ExportError(UnsupportedOpError):
    """A function holds a node the ONNX exporter has no writer for."""


@dataclass
class _Graph:
    """The ONNX graph being written: nodes, initializers, and the tensor name of each glow node."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    names: dict[Node, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def fresh(self, base: str) -> str:
        """A tensor name not used yet, derived from ``base``."""
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def constant(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], base: str, **attrs: object) -> str:
        """Append one ONNX node; returns its output's name."""
        out = self.fresh(base)
        self.nodes.append(
            helper.make_node(op_type, inputs, [out], name=self.fresh(f"{base}/{op_type}"), **attrs)
        )
        return out


Writer = Callable[[_Graph, Node, list[str]], str]
"""(graph, glow node, its operands' tensor names) -> the tensor holding the node's result."""

WRITERS: dict[str, Writer] = {}


def writes(*kinds: str) -> Callable[[Writer], Writer]:
    def register(writer: Writer) -> Writer:
        for kind in kinds:
            WRITERS[kind] = writer
        return writer

    return register


def _activation(g: _Graph, node: Node, value: str) -> str:
    """The fused activation a Conv or FullyConnected carries, as its own ONNX node."""
    if node.activation == "none":
        return value
    if node.activation == "relu":
        return g.op("Relu", [value], f"{node.name}/relu")
    low, high = node.activation_args
    bounds = [
        g.constant(f"{node.name}/{b}", np.array(v, node.type.dtype))
        for b, v in (("low", low), ("high", high))
    ]
    return g.op("Clip", [value, *bounds], f"{node.name}/clip")


@writes("Conv")
def _conv(g: _Graph, node: Node, args: list[str]) -> str:
    # glow's pads are (top, left, bottom, right): ONNX's (x1_begin, x2_begin, x1_end, x2_end).
    conv = g.op(
        "Conv",
        args,
        node.name,
        strides=list(node.strides),
        pads=list(node.pads),
        dilations=list(node.dilations),
        group=node.group,
    )
    return _activation(g, node, conv)


@writes("FullyConnected")
def _fully_connected(g: _Graph, node: Node, args: list[str]) -> str:
    return _activation(g, node, g.op("Gemm", args, node.name))


_SAME_NAME = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Add", "Sub", "Mul", "Div",
              "Max", "Min", "Pow", "MatMul")  # fmt: skip


@writes(*_SAME_NAME)
def _same_name(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op(node.kind, args, node.name)


@writes("BatchMatMul")
def _batch_matmul(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("MatMul", args, node.name)


@writes("MaxPool", "AvgPool")
def _pool(g: _Graph, node: Node, args: list[str]) -> str:
    attrs: dict[str, object] = {
        "kernel_shape": list(node.kernel),
        "strides": list(node.strides),
        "pads": list(node.pads),
    }
    if node.kind == "AvgPool":
        attrs["count_include_pad"] = int(node.count_include_pad)
    return g.op("MaxPool" if node.kind == "MaxPool" else "AveragePool", args, node.name, **attrs)


@writes("Softmax", "LogSoftmax")
def _softmax(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op(node.kind, args, node.name, axis=node.axis)


@writes("LeakyRelu")
def _leaky_relu(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("LeakyRelu", args, node.name, alpha=node.alpha)


@writes("Clip")
def _clip(g: _Graph, node: Node, args: list[str]) -> str:
    dtype = node.type.dtype
    bounds = [
        g.constant(f"{node.name}/{b}", np.array(v, dtype))
        for b, v in (("low", node.low), ("high", node.high))
    ]
    return g.op("Clip", [*args, *bounds], node.name)


@writes("BatchNorm")
def _batch_norm(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("BatchNormalization", args, node.name, epsilon=node.epsilon)


@writes("LayerNorm")
def _layer_norm(g: _Graph, node: Node, args: list[str]) -> str:
    # ONNX wants scale and bias of the normalized shape; glow lets them broadcast to it.
    norm_shape = node.type.shape[node.axis % node.type.rank :]
    for k, operand in ((1, node.scale), (2, node.bias)):
        if operand.type.shape != norm_shape:
            shape = g.constant(f"{node.name}/norm_shape", np.array(norm_shape, np.int64))
            args[k] = g.op("Expand", [args[k], shape], f"{node.name}/{('scale', 'bias')[k - 1]}")
    return g.op("LayerNormalization", args, node.name, axis=node.axis, epsilon=node.epsilon)


@writes("Reshape")
def _reshape(g: _Graph, node: Node, args: list[str]) -> str:
    shape = g.constant(f"{node.name}/shape", np.array(node.type.shape, np.int64))
    return g.op("Reshape", [args[0], shape], node.name)


@writes("Broadcast")
def _broadcast(g: _Graph, node: Node, args: list[str]) -> str:
    shape = g.constant(f"{node.name}/shape", np.array(node.shape, np.int64))
    return g.op("Expand", [args[0], shape], node.name)


@writes("Transpose")
def _transpose(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("Transpose", args, node.name, perm=list(node.shuffle))


@writes("Concat")
def _concat(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("Concat", args, node.name, axis=node.axis)


@writes("ReduceSum", "ReduceMax")
def _reduce(g: _Graph, node: Node, args: list[str]) -> str:
    # glow's reductions keep the reduced axes (as size 1), as ONNX's keepdims=1 does.
    if node.kind == "ReduceSum":
        axes = g.constant(f"{node.name}/axes", np.array(node.axes, np.int64))
        return g.op("ReduceSum", [args[0], axes], node.name, keepdims=1)
    return g.op("ReduceMax", args, node.name, axes=list(node.axes), keepdims=1)


@writes("Slice")
def _slice(g: _Graph, node: Node, args: list[str]) -> str:
    rank = node.type.rank
    steps = node.steps or (1,) * rank
    # glow's end -1 with a negative step means "past the front"; in ONNX -1 is the last
    # element, and "past the front" is any end below -size: INT64_MIN says it for every size.
    ends = [
        np.iinfo(np.int64).min if e == -1 and st < 0 else e for e, st in zip(node.ends, steps, strict=True)
    ]
    tensors = [
        g.constant(f"{node.name}/{what}", np.array(values, np.int64))
        for what, values in (("starts", node.starts), ("ends", ends), ("axes", range(rank)), ("steps", steps))
    ]
    return g.op("Slice", [args[0], *tensors], node.name)


@writes("Pad")
def _pad(g: _Graph, node: Node, args: list[str]) -> str:
    pads = g.constant(f"{node.name}/pads", np.array(node.pads, np.int64))
    value = g.constant(f"{node.name}/value", np.array(node.value, node.type.dtype))
    return g.op("Pad", [args[0], pads, value], node.name, mode="constant")


@writes("Gather")
def _gather(g: _Graph, node: Node, args: list[str]) -> str:
    # Identical for indices in range; glow clamps the others where ONNX calls them an error.
    return g.op("Gather", args, node.name, axis=node.axis)


_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual"}


@writes("Compare")
def _compare(g: _Graph, node: Node, args: list[str]) -> str:
    # attrs, not node.predicate: that is the node's run-time predicate (Glow's), not this one.
    return g.op(_COMPARE[node.attrs["predicate"]], args, node.name)


@writes("Select")
def _select(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("Where", args, node.name)


@writes("Convert")
def _convert(g: _Graph, node: Node, args: list[str]) -> str:
    return g.op("Cast", args, node.name, to=_elem(node))


@writes("Splat")
def _splat(g: _Graph, node: Node, args: list[str]) -> str:
    # One element expanded to the shape: the file holds a scalar, not the whole tensor.
    one = g.constant(f"{node.name}/value", np.full((1,) * node.type.rank, node.value, node.type.dtype))
    shape = g.constant(f"{node.name}/shape", np.array(node.type.shape, np.int64))
    return g.op("Expand", [one, shape], node.name)


def export_function(fn: Function, values: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """``fn`` as an ONNX model; a Constant named in ``values`` is written with that value
    (the trained weights), the others with their own. Checked with onnx's checker."""
    values = values or {}
    copy = fn.module.clone()  # lowered below: the caller's function is never changed
    fn = copy.functions[fn.name]
    lower_function(fn, should_lower=lambda n: n.kind not in WRITERS)
    order = _needed(fn)
    missing = [
        n
        for n in order
        if not isinstance(n, Placeholder | Constant) and n.kind != "Save" and n.kind not in WRITERS
    ]
    if missing:
        first = missing[0]
        raise ExportError(
            f"cannot export {fn.name!r} to ONNX: node {first.name!r} of kind {first.kind} has no ONNX "
            f"writer (kinds without one here: {sorted({n.kind for n in missing})}); the writers cover "
            f"{sorted(WRITERS)}: add one in glow_core/training/onnx_export.py"
        )
    predicated = [n.name for n in order if n.predicate is not None]
    if predicated:
        raise ExportError(
            f"cannot export {fn.name!r} to ONNX: nodes {predicated[:5]} run under a run-time "
            f"predicate, which ONNX has no way to say"
        )
    g = _Graph()
    inputs = []
    for n in order:
        if isinstance(n, Placeholder):
            g.names[n] = g.fresh(n.name)
            inputs.append(helper.make_tensor_value_info(n.name, _elem(n), list(n.type.shape)))
        elif isinstance(n, Constant):
            value = np.asarray(values.get(n.name, n.value), n.type.dtype).reshape(n.type.shape)
            g.names[n] = g.constant(n.name, value)
    outputs = []
    for n in order:
        if isinstance(n, Placeholder | Constant):
            continue
        if n.kind == "Save":
            target = n.operand("output")
            g.names[target] = g.fresh(target.name)
            g.nodes.append(
                helper.make_node(
                    "Identity",
                    [g.names[n.operand("input")]],
                    [g.names[target]],
                    name=g.fresh(f"{target.name}/save"),
                )
            )
            outputs.append(helper.make_tensor_value_info(target.name, _elem(target), list(target.type.shape)))
            continue
        g.names[n] = WRITERS[n.kind](g, n, [g.names[i] for i in n.inputs])
    graph = helper.make_graph(g.nodes, fn.name, inputs, outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="glow-py")
    onnx.checker.check_model(model, full_check=True)
    return model


def _needed(fn: Function) -> list[Node]:
    """Every node and storage the outputs read, in a topological order (inputs first)."""
    needed: set[Node] = set()
    stack = list(fn.saves)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.dependencies)
    inputs = [p for p in fn.inputs if p in needed]
    constants = [c for c in fn.storage() if isinstance(c, Constant) and c in needed]
    return [*inputs, *constants, *(n for n in fn.topological_order() if n in needed)]


def _elem(n: Node) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(n.type.dtype))
