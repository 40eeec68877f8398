"""The host partition of a Session: ONNX nodes run in numpy around compiled device parts.

glow compiles numeric tensors of static element kinds. String tensors (StringConcat,
StringSplit, RegexFullMatch, a string Equal or LabelEncoder...) and ImageDecoder, whose
input is encoded bytes and whose output shape depends on them, cannot be compiled; they
run on the host, per call, with the kernels of ``glow_core.runtime.host_ops``. Splitting a model
between devices is part of glow's design, and the host is one more device here.

``partition`` splits the ONNX graph once, when the Session opens the model:

- each node goes to the host (a ``host_ops`` entry claims it) or to the device;
- nodes are grouped into *stages* that alternate host, device, host...: a node joins the
  earliest stage of its kind that comes after (or is) the stages of every value it reads,
  so the common case (string preprocessing, then numeric math) is one host stage and one
  device stage, and a host op fed by device values (an ArgMax then a LabelEncoder to
  class names) is a host stage after it;
- a device stage becomes an ONNX sub-model whose graph inputs are the values it reads
  from earlier stages, run by its own Session (specialized and compiled per call
  signature as any model is). Nothing is compiled when every output comes from the host.

Initializers and Constant nodes are available to every stage (a sub-model gets copies of
those it reads). A device node that reads a string tensor is refused with the reason,
before anything is compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from glow_core.errors import InputError, UnsupportedOpError
from glow_core.frontends.onnx.model import ordered_nodes
from glow_core.frontends.onnx.string_values import STRING, objects
from glow_core.runtime.host_ops import (
    HostNode,
    Prepared,
    always_host,
    decode_attributes,
    host_op_for,
    host_op_names,
)

_HOST, _DEVICE = 0, 1
"""Stage parity: host stages are even (0, 2, ...), device stages odd (1, 3, ...)."""


@dataclass(frozen=True)
class HostStep:
    """One node run on the host: its kernel and the tensors it reads ("" if absent) and writes."""

    node: str
    prepared: Prepared
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class DevicePart(Protocol):
    """A compiled part as the host plan runs it: a Session of the part's sub-model."""

    input_names: list[str]

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]: ...


OpenPart = Callable[[onnx.ModelProto, Mapping[str, Sequence[int]] | None, int], DevicePart]
"""(sub-model, the input shapes it was given or None, its 1-based position) -> the part that
runs it. The Session passes its own factory, so this module never imports the Session."""


@dataclass(frozen=True)
class DeviceStep:
    """A compiled part: a sub-model run by its own Session on values of earlier steps."""

    part: DevicePart


class HostPlan:
    """A model split into steps run in order: host nodes and compiled device parts."""

    def __init__(self, steps: Sequence[HostStep | DeviceStep], constants: Mapping[str, np.ndarray]):
        self.steps = tuple(steps)
        self.constants = dict(constants)
        """Initializers and Constant values read by host steps or returned as graph outputs."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every tensor the steps compute from ``feeds`` (checked graph inputs), by name."""
        env: dict[str, np.ndarray] = {**self.constants, **feeds}
        for step in self.steps:
            if isinstance(step, DeviceStep):
                env.update(step.part.run({n: env[n] for n in step.part.input_names}))
                continue
            results = step.prepared.run([env[n] if n else None for n in step.inputs])
            for name, value in zip(step.outputs, results, strict=False):
                if name:
                    env[name] = value
        return env


def partition(
    proto: onnx.ModelProto,
    source: str,
    input_names: Sequence[str],
    input_shapes: Mapping[str, Sequence[int]] | None,
    open_part: OpenPart,
) -> HostPlan | None:
    """The host plan of model ``proto`` (``source`` says where it came from, for messages;
    ``input_names`` are its real inputs), or None when nothing in it needs the host.

    Device parts are opened by ``open_part`` (a Session makes Sessions with its own backend,
    options and limits); ``input_shapes`` reaches the part that reads those inputs directly.
    """
    graph = proto.graph
    _refuse_nested_host_ops(graph)
    if not _may_need_host(graph):
        return None
    unknown = sorted(set(input_shapes or {}) - set(input_names))
    if unknown:
        raise InputError(
            f"input_shapes names {unknown}, which are not model inputs; the inputs are {list(input_names)}"
        )
    return _Splitter(proto, source, input_shapes, open_part).plan()


# ---- reading the graph --------------------------------------------------------------------


def _subgraphs(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    found = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            found.append((attr.name, attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            found.extend((attr.name, g) for g in attr.graphs)
    return found


def _reads(node: onnx.NodeProto) -> list[str]:
    """The tensors ``node`` reads: its inputs and what its subgraphs read from outside them."""
    names = [n for n in node.input if n]
    for _, graph in _subgraphs(node):
        names.extend(sorted(_outer_reads(graph)))
    return names


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        defined.update(n for n in node.output if n)
        reads.update(_reads(node))
    return reads - defined


def _refuse_nested_host_ops(graph: onnx.GraphProto) -> None:
    """A string or image op inside an If/Loop/Scan body: the host runs main-graph nodes only."""
    for node in graph.node:
        for attr, body in _subgraphs(node):
            for inner in body.node:
                if always_host(inner):
                    raise UnsupportedOpError(
                        f"ONNX node {inner.name or inner.output[0]!r} ({inner.op_type}) is inside the "
                        f"{attr} of node {node.name or node.output[0]!r} ({node.op_type}); glow runs "
                        f"{inner.op_type} on the host, which takes nodes of the main graph only: "
                        "move it out of the subgraph"
                    )
            _refuse_nested_host_ops(body)


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and not node.input


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """A Constant node's value (None for a sparse one, left to the device loader)."""
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if attr.name == "value":
            return numpy_helper.to_array(value)
        if attr.name == "value_string":
            return objects(value.decode("utf-8"), ())
        if attr.name == "value_strings":
            return objects([v.decode("utf-8") for v in value], (len(value),))
        if attr.name in ("value_float", "value_floats"):
            return np.asarray(value, np.float32)
        if attr.name in ("value_int", "value_ints"):
            return np.asarray(value, np.int64)
    return None


def _is_string_constant(node: onnx.NodeProto) -> bool:
    for attr in node.attribute:
        if attr.name in ("value_string", "value_strings"):
            return True
        if attr.name == "value" and attr.t.data_type == STRING:
            return True
    return False


def _may_need_host(graph: onnx.GraphProto) -> bool:
    """A cheap first look: string tensors, or an op the host may claim."""
    if any(v.type.tensor_type.elem_type == STRING for v in graph.input):
        return True
    if any(t.data_type == STRING for t in graph.initializer):
        return True
    return any(host_op_for(n) is not None or (_is_constant(n) and _is_string_constant(n)) for n in graph.node)


def _elem_type(value: onnx.ValueInfoProto) -> int:
    return value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0


# ---- splitting ----------------------------------------------------------------------------


class _Splitter:
    """One pass over the graph: each node's side and stage, then the steps."""

    def __init__(
        self,
        proto: onnx.ModelProto,
        source: str,
        input_shapes: Mapping[str, Sequence[int]] | None,
        open_part: OpenPart,
    ):
        self.proto, self.source = proto, source
        self.input_shapes = input_shapes
        self.open_part = open_part
        graph = self.proto.graph
        self.initializers = {t.name: t for t in graph.initializer}
        self.graph_inputs = {v.name: v for v in graph.input if v.name not in self.initializers}
        self.strings = {n for n, v in self.graph_inputs.items() if _elem_type(v) == STRING}
        self.strings |= {n for n, t in self.initializers.items() if t.data_type == STRING}
        self.constant_nodes: dict[str, onnx.NodeProto] = {}
        self.constant_values: dict[str, np.ndarray] = {}
        self.stage: dict[str, int] = {}
        """Tensor -> the stage that computes it (absent: a graph input or a constant)."""
        self.host_types: dict[str, int] = {}
        """Host outputs -> their ONNX element type (for the sub-models that read them)."""
        self._inferred: dict[str, int] | None = None

    def plan(self) -> HostPlan | None:
        graph = self.proto.graph
        nodes = _live(ordered_nodes(graph, self.source), [v.name for v in graph.output])
        stages: dict[int, list[tuple[onnx.NodeProto, Prepared | None]]] = {}
        for node in nodes:
            if _is_constant(node) and (value := _constant_value(node)) is not None:
                self.constant_nodes[node.output[0]] = node
                self.constant_values[node.output[0]] = value
                if value.dtype.kind == "O":
                    self.strings.add(node.output[0])
                continue
            prepared = self._host_kernel(node)
            reads = _reads(node)
            if prepared is None:
                self._refuse_strings(node, reads)
            side = _DEVICE if prepared is None else _HOST
            at = max([0, *(self.stage.get(name, -1) for name in reads)])
            at += (at - side) % 2
            stages.setdefault(at, []).append((node, prepared))
            for index, name in enumerate(node.output):
                if name:
                    self.stage[name] = at
                    if prepared is not None and index < len(prepared.outputs):
                        self.host_types[name] = prepared.outputs[index]
                        if prepared.outputs[index] == STRING:
                            self.strings.add(name)
        if not self.strings and not any(at % 2 == _HOST for at in stages):
            return None  # e.g. a numeric Equal or LabelEncoder: compiled as a whole, as before
        return self._steps(stages)

    def _host_kernel(self, node: onnx.NodeProto) -> Prepared | None:
        """The prepared kernel when the host runs ``node``, else None (the device does)."""
        entry = host_op_for(node)
        if entry is None:
            return None
        view = HostNode(node, decode_attributes(node), tuple(name in self.strings for name in node.input))
        return entry.prepare(view) if entry.claims(view) else None

    def _refuse_strings(self, node: onnx.NodeProto, reads: Iterable[str]) -> None:
        strings = [name for name in reads if name in self.strings]
        if strings:
            raise UnsupportedOpError(
                f"ONNX node {node.name or node.output[0]!r} ({node.op_type}) reads the string tensor "
                f"{strings[0]!r}; glow compiles numeric tensors only, and runs strings on the host "
                f"through {', '.join(host_op_names())} (Equal and LabelEncoder when they read or "
                "produce strings); map the strings to numbers first (e.g. with LabelEncoder)"
            )

    def _steps(self, stages: dict[int, list[tuple[onnx.NodeProto, Prepared | None]]]) -> HostPlan:
        order = sorted(stages)
        graph_outputs = [v.name for v in self.proto.graph.output]
        steps: list[HostStep | DeviceStep] = []
        parts = 0
        host_reads: set[str] = set(graph_outputs)
        for index, at in enumerate(order):
            if at % 2 == _HOST:
                for node, prepared in stages[at]:
                    assert prepared is not None
                    name = node.name or node.output[0]
                    steps.append(HostStep(name, prepared, tuple(node.input), tuple(node.output)))
                    host_reads.update(n for n in node.input if n)
                continue
            later = set(graph_outputs)
            for after in order[index + 1 :]:
                for node, _ in stages[after]:
                    later.update(_reads(node))
            parts += 1
            steps.append(DeviceStep(self._device_part([node for node, _ in stages[at]], later, parts)))
        constants = {n: v for n, v in self.constant_values.items() if n in host_reads}
        for name in host_reads & self.initializers.keys():
            constants[name] = numpy_helper.to_array(self.initializers[name])
        return HostPlan(steps, constants)

    def _device_part(self, nodes: list[onnx.NodeProto], later: set[str], position: int) -> DevicePart:
        """The compiled part of one device stage: a sub-model of ``nodes`` and what they read."""
        model = self._sub_model(nodes, later, position)
        names = [v.name for v in model.graph.input]
        shapes = None
        if self.input_shapes is not None and all(n in self.graph_inputs for n in names):
            shapes = {n: s for n, s in self.input_shapes.items() if n in names}
        return self.open_part(model, shapes, position)

    def _sub_model(self, nodes: list[onnx.NodeProto], later: set[str], position: int) -> onnx.ModelProto:
        produced = {name for node in nodes for name in node.output if name}
        reads = list(dict.fromkeys(name for node in nodes for name in _reads(node) if name not in produced))
        constants = [self.constant_nodes[n] for n in reads if n in self.constant_nodes]
        initializers = [self.initializers[n] for n in reads if n in self.initializers]
        inputs = []
        for name in reads:
            if name in self.constant_nodes or name in self.initializers:
                continue
            if name in self.graph_inputs:
                inputs.append(self.graph_inputs[name])
            else:
                inputs.append(helper.make_tensor_value_info(name, self._type_of(name), None))
        declared = {v.name: v for v in self.proto.graph.output}  # a graph output keeps its type
        outputs = [
            declared.get(name) or helper.make_empty_tensor_value_info(name)
            for node in nodes
            for name in node.output
            if name and name in later
        ]
        graph = helper.make_graph(
            [*constants, *nodes],
            f"{self.proto.graph.name or 'model'}_part{position}",
            inputs,
            outputs,
            initializer=initializers,
        )
        model = helper.make_model(graph, opset_imports=list(self.proto.opset_import))
        model.ir_version = self.proto.ir_version
        model.functions.extend(self.proto.functions)
        return model

    def _type_of(self, name: str) -> int:
        """The element type of a tensor one stage hands to a later device stage."""
        if name in self.host_types:
            return self.host_types[name]
        if self._inferred is None:
            self._inferred = _inferred_types(self.proto)
        found = self._inferred.get(name, 0)
        if not found:
            raise UnsupportedOpError(
                f"{self.source}: cannot tell the element type of tensor {name!r}, which one "
                "compiled part of the model hands to another around host nodes; declare it in the "
                "model's value_info (onnx.shape_inference.infer_shapes does that)"
            )
        return found


def _live(nodes: list[onnx.NodeProto], outputs: Sequence[str]) -> list[onnx.NodeProto]:
    """The nodes some graph output depends on, in order (dead ones would be split needlessly)."""
    needed = set(outputs)
    keep = []
    for node in reversed(nodes):
        if any(name in needed for name in node.output if name):
            keep.append(node)
            needed.update(_reads(node))
    return keep[::-1]


def _inferred_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Element types by tensor name from onnx's type inference (what the model declares if it fails)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # inference raises a variety of errors on models it cannot follow
        inferred = proto
    graph = inferred.graph
    values = [*graph.input, *graph.value_info, *graph.output]
    return {v.name: _elem_type(v) for v in values if _elem_type(v)}


__all__ = ["DeviceStep", "HostPlan", "HostStep", "partition"]
