"""``load_onnx``: read an ONNX model and build one glow Function from it.

Everything that can be checked before building is checked first (readable file, opset,
every op supported), so a model glow cannot run fails in one line naming the cause, not
half-way through with a partial graph. Shapes come from glow's own type rules as nodes are
built; declared intermediate shapes in the model are never trusted.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from glow_core.errors import GlowError, InputError, ModelLoadError, ShapeError, UnsupportedOpError
from glow_core.frontends.onnx.fold import can_fold, fold_node
from glow_core.frontends.onnx.registry import (
    IMPORTERS,
    ImportResult,
    NodeContext,
    Value,
    constant_node,
    elem_kind_of,
)
from glow_core.graph.builder import Builder
from glow_core.graph.function import Module
from glow_core.graph.node import Node
from glow_core.types import ElemKind

MIN_OPSET = 7
_DEFAULT_DOMAINS = ("", "ai.onnx")
_SUPPORTED_HINT = "supported ops: see glow_core.frontends.onnx.SUPPORTED_OPS"

ModelSource = str | os.PathLike | bytes | onnx.ModelProto

ValueResolver = Callable[[Module, Node, str], np.ndarray]
"""Computes a value glow needs at load time (a condition, a shape) that the graph computes
from its inputs: called with the module built so far, the value's node and its ONNX name."""


def load_onnx(
    model: ModelSource,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    static_inputs: Mapping[str, np.ndarray] | None = None,
    resolve: ValueResolver | None = None,
) -> Module:
    """A Module with one Function "main" computing ``model``'s graph outputs.

    ``model`` is a path, serialized bytes or a ModelProto. ``input_shapes`` fixes input
    dimensions the model leaves symbolic; without it a symbolic leading (batch) dimension
    becomes 1 and any other symbolic dimension is an error. ``static_inputs`` fixes the
    values of inputs that glow needs at load time (a target shape, axes, an If condition:
    shape specialization, refused otherwise with ``LoadTimeValueError`` naming them); those
    inputs become constants and are no longer inputs of the compiled function.
    ``resolve``, when given, is asked for every such value computed at run time instead of
    refusing it (the runtime's ``glow_core.load`` computes it on the inputs of a call).
    """
    proto, source = _read_model(model)
    proto, opset = _upgrade(proto, _default_opset(proto, source), source)
    _check_supported(proto.graph, proto, opset)
    nodes = _ordered_nodes(proto.graph, source)
    module = Module(proto.graph.name or "onnx_model")
    state = _GraphImport(module, opset, _used_tensors(proto.graph), source, resolve)
    state.add_inputs(proto.graph, dict(input_shapes or {}), dict(static_inputs or {}))
    for node in nodes:
        state.import_node(node)
    state.save_outputs(proto.graph, source)
    return module


# ---- reading and checking the model ------------------------------------------------------


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _read_model(model: ModelSource) -> tuple[onnx.ModelProto, str]:
    """The parsed model and a description of where it came from (for error messages)."""
    if isinstance(model, onnx.ModelProto):
        return model, "ONNX model"
    if isinstance(model, bytes | bytearray):
        source = "ONNX model bytes"
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as err:  # protobuf raises DecodeError and friends
            raise ModelLoadError(
                f"cannot parse {source}: {type(err).__name__}: {_one_line(err)}; "
                "the data may be truncated or not an ONNX model, re-export it"
            ) from None
    else:
        path = os.fspath(model)
        source = f"ONNX model file {path!r}"
        if not os.path.isfile(path):
            raise ModelLoadError(f"{source} does not exist or is not a file")
        try:
            proto = onnx.load(path)
        except Exception as err:
            raise ModelLoadError(
                f"cannot read {source}: {type(err).__name__}: {_one_line(err)}; "
                "the file may be truncated or not an ONNX model, re-export it"
            ) from None
    if not proto.HasField("graph") or not proto.graph.output:
        raise ModelLoadError(f"{source} has no graph or no graph outputs; it may be truncated, re-export it")
    return proto, source


def _default_opset(proto: onnx.ModelProto, source: str) -> int:
    """The default domain's opset; a model of other domains only (``ai.onnx.ml``,
    ``ai.onnx.preview.training``) needs none, and gets the newest onnx knows."""
    versions = [op.version for op in proto.opset_import if op.domain in _DEFAULT_DOMAINS]
    if versions:
        return max(versions)
    default_nodes = [n for n in _all_nodes(proto.graph) if n.domain in _DEFAULT_DOMAINS]
    if default_nodes:
        node = default_nodes[0]
        raise ModelLoadError(
            f"{source} uses default-domain op {node.op_type!r} (node {node.name or node.output[0]!r}) "
            "but imports no opset of the default ONNX domain; re-export it with an opset_import for ''"
        )
    return int(onnx.defs.onnx_opset_version())


def _upgrade(proto: onnx.ModelProto, opset: int, source: str) -> tuple[onnx.ModelProto, int]:
    """A model older than MIN_OPSET converted up by onnx's version converter, when it can be."""
    if opset >= MIN_OPSET:
        return proto, opset
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = version_converter.convert_version(proto, MIN_OPSET)
    except Exception as err:  # the converter raises plain RuntimeErrors
        raise ModelLoadError(
            f"{source} uses ONNX opset {opset}, older than the oldest glow supports ({MIN_OPSET}), "
            f"and onnx's version converter could not upgrade it ({type(err).__name__}: {_one_line(err)}); "
            "re-export it with a newer opset"
        ) from None
    return converted, MIN_OPSET


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of ``graph`` and of its If branches and loop bodies (imported inline)."""
    nodes = []
    for node in graph.node:
        nodes.append(node)
        if node.op_type in ("If", "Loop", "Scan"):
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    nodes.extend(_all_nodes(attr.g))
    return nodes


def _has_importer(node: onnx.NodeProto) -> bool:
    """Whether glow imports ``node``: a default-domain op, or one of another domain
    (``ai.onnx.ml``, ``ai.onnx.preview``, ``ai.onnx.preview.training``) registered as such."""
    entry = IMPORTERS.get(node.op_type)
    if entry is None:
        return False
    return node.domain in _DEFAULT_DOMAINS if not entry.domain else node.domain == entry.domain


def _check_supported(graph: onnx.GraphProto, proto: onnx.ModelProto, opset: int) -> None:
    """Refuse, before building anything, a model with any op glow has no importer for."""
    domain_opsets = {op.domain: op.version for op in proto.opset_import}
    bad = [n for n in _all_nodes(graph) if not _has_importer(n)]
    if not bad:
        return
    first = bad[0]
    version = opset if first.domain in _DEFAULT_DOMAINS else domain_opsets.get(first.domain, "?")
    others = sorted(
        {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in bad[1:]} - {first.op_type}
    )
    more = f" (also unsupported in this model: {', '.join(others)})" if others else ""
    raise UnsupportedOpError(
        f"ONNX op {first.op_type!r} (node {first.name or first.output[0]!r}, domain {first.domain!r}, "
        f"opset {version}) is not supported by glow; {_SUPPORTED_HINT}{more}"
    )


def _ordered_nodes(graph: onnx.GraphProto, source: str, outer: Collection[str] = ()) -> list[onnx.NodeProto]:
    """Nodes in an order where each one's inputs exist (ONNX requires it; be lenient).

    A tensor that nothing defines means the model is incomplete (a truncated file can
    still parse), which is reported here rather than as a KeyError while building.
    ``outer`` names the tensors of enclosing graphs a subgraph may read.
    """
    defined = set(outer) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    order: list[onnx.NodeProto] = []
    pending = list(graph.node)
    while pending:
        waiting = []
        for node in pending:
            if all(not name or name in defined for name in node.input):
                order.append(node)
                defined.update(name for name in node.output if name)
            else:
                waiting.append(node)
        if len(waiting) == len(pending):
            node = waiting[0]
            missing = next(name for name in node.input if name and name not in defined)
            raise ModelLoadError(
                f"{source}: tensor {missing!r} read by node {node.name or node.output[0]!r} "
                f"({node.op_type}) is never produced; the model is incomplete or cyclic, re-export it"
            )
        pending = waiting
    return order


def _used_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors some node (here or in a subgraph) reads or the graph returns: they must be produced."""
    used = {v.name for v in graph.output}
    for node in graph.node:
        used.update(name for name in node.input if name)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                used |= _used_tensors(attr.g)
    return used


# ---- building ----------------------------------------------------------------------------


def _input_shape(info: onnx.ValueInfoProto, overrides: dict[str, Sequence[int]]) -> tuple[int, ...]:
    """Concrete dims of a graph input: ``overrides`` first, else declared, batch -> 1."""
    tensor = info.type.tensor_type
    declared = tensor.shape.dim if tensor.HasField("shape") else None
    if info.name in overrides:
        shape = tuple(int(d) for d in overrides[info.name])
        if declared is not None and len(declared) != len(shape):
            raise InputError(
                f"input_shapes[{info.name!r}] = {list(shape)} has rank {len(shape)}, "
                f"but the model declares rank {len(declared)}"
            )
        if any(d < 0 for d in shape):
            raise InputError(f"input_shapes[{info.name!r}] = {list(shape)} has a negative dimension")
        return shape
    if declared is None:
        raise ModelLoadError(
            f"input {info.name!r} declares no shape; pass input_shapes={{{info.name!r}: [...]}}"
        )
    dims = []
    for axis, dim in enumerate(declared):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif axis == 0:
            dims.append(1)
        else:
            label = f"symbolic ({dim.dim_param!r})" if dim.dim_param else "unknown"
            raise ModelLoadError(
                f"input {info.name!r} dimension {axis} is {label}; glow needs static shapes: "
                f"pass input_shapes={{{info.name!r}: [...]}} to load_onnx"
            )
    return tuple(dims)


def _static_input(info: onnx.ValueInfoProto, value: np.ndarray) -> np.ndarray:
    """A value given for an input in ``static_inputs``, checked against the declared type."""
    array = np.asarray(value)
    declared = info.type.tensor_type
    if declared.elem_type and array.dtype != helper.tensor_dtype_to_np_dtype(declared.elem_type):
        raise InputError(
            f"static_inputs[{info.name!r}] has dtype {array.dtype}, but the model declares "
            f"{helper.tensor_dtype_to_np_dtype(declared.elem_type)}"
        )
    if declared.HasField("shape") and len(declared.shape.dim) != array.ndim:
        raise InputError(
            f"static_inputs[{info.name!r}] has rank {array.ndim}, but the model declares "
            f"rank {len(declared.shape.dim)}"
        )
    return array


class _GraphImport:
    """The tensors known so far (name -> Value) and the function being built."""

    def __init__(
        self, module: Module, opset: int, used: set[str], source: str, resolve: ValueResolver | None = None
    ):
        self.module = module
        self.resolve = resolve
        self.used = used
        self.source = source
        self.fn = module.create_function("main")
        self.opset = opset
        self.values: dict[str, Value] = {}
        self._constants: dict[str, tuple[np.ndarray, Node]] = {}
        self._behind: dict[str, frozenset[str]] = {}
        self._recipes: dict[str, onnx.NodeProto] = {}
        self._node_behind: dict[int, frozenset[str]] = {}
        self._known: dict[str, np.ndarray | None] = {}

    def add_inputs(
        self, graph: onnx.GraphProto, overrides: dict[str, Sequence[int]], static: dict[str, np.ndarray]
    ) -> None:
        """Placeholders for real inputs; initializers and static inputs stay arrays until needed."""
        initializers = {t.name for t in graph.initializer}
        real = [v for v in graph.input if v.name not in initializers]
        for given, what in ((overrides, "input_shapes"), (static, "static_inputs")):
            unknown = set(given) - {v.name for v in real}
            if unknown:
                raise InputError(
                    f"{what} names {sorted(unknown)}, which are not model inputs; "
                    f"the inputs are {[v.name for v in real]}"
                )
        for info in graph.output:
            self.module.unique_name(info.name)  # reserve: output placeholders take these names
        b = self.fn.builder()
        for info in real:
            if info.name in static:
                self.values[info.name] = _static_input(info, static[info.name])
                continue
            if not info.type.HasField("tensor_type"):
                kind = (info.type.WhichOneof("value") or "untyped").replace("_type", "")
                raise UnsupportedOpError(
                    f"input {info.name!r} is {kind}, not a tensor; glow takes tensors only"
                )
            elem = elem_kind_of(info.type.tensor_type.elem_type, f"input {info.name!r}")
            self.values[info.name] = b.placeholder(info.name, _input_shape(info, overrides), elem)
            self._behind[info.name] = frozenset([info.name])
            self._node_behind[id(self.values[info.name])] = self._behind[info.name]
        for tensor in graph.initializer:
            self.values[tensor.name] = numpy_helper.to_array(tensor)

    def inputs_behind(self, name: str) -> frozenset[str]:
        return self._behind.get(name, frozenset())

    def known_value(self, name: str) -> np.ndarray | None:
        """The value of ``name``, needed at load time: from constants, else from ``resolve``."""
        found = self._constant_value(name)
        value = self.values.get(name)
        if found is None and self.resolve is not None and isinstance(value, Node):
            found = self._known[name] = np.asarray(self.resolve(self.module, value, name))
        return found

    def _constant_value(self, name: str) -> np.ndarray | None:
        """Run by onnx.reference the nodes that computed ``name`` when they read constants only.

        Importers keep float math on constants in the graph (the compiler folds it later);
        when such a value turns out to be a shape or an axis, it is computed here instead.
        """
        value = self.values.get(name)
        if isinstance(value, np.ndarray):
            return value
        if name in self._known:
            return self._known[name]
        self._known[name] = None  # also guards against cycles
        node = self._recipes.get(name)
        if node is None or self.inputs_behind(name):
            return None
        inputs = {i: self._constant_value(i) for i in node.input if i}
        if any(v is None for v in inputs.values()):
            return None
        try:
            results = fold_node(node, inputs, self.opset)  # type: ignore[arg-type]
        except ShapeError:
            return None
        for output, result in zip(node.output, results, strict=False):
            self._known[output] = result
        return self._known[name]

    def import_graph(self, graph: onnx.GraphProto, inputs: Sequence[Value] = ()) -> list[Value]:
        """Import a subgraph inline (an If branch, one unrolled loop iteration).

        Its nodes read outer tensors by name, as ONNX scoping says; ``inputs`` are bound to
        the subgraph's declared inputs first. Load-time values computed for an earlier
        import of the same subgraph are forgotten, since the inputs differ.
        """
        if len(inputs) != len(graph.input):
            raise ModelLoadError(
                f"{self.source}: subgraph {graph.name!r} takes {len(graph.input)} inputs, got {len(inputs)}"
            )
        for info, value in zip(graph.input, inputs, strict=True):
            self.values[info.name] = value
            self._behind[info.name] = self._node_behind.get(id(value), frozenset())
        self._known.clear()
        for tensor in graph.initializer:
            self.values[tensor.name] = numpy_helper.to_array(tensor)
        for node in _ordered_nodes(graph, self.source, outer=self.values.keys()):
            self.import_node(node)
        missing = [v.name for v in graph.output if v.name not in self.values]
        if missing:
            raise ModelLoadError(f"{self.source}: subgraph {graph.name!r} never produces {missing}")
        return [self.values[v.name] for v in graph.output]

    def materialize(self, name: str) -> Node:
        """The tensor ``name`` as a node; a load-time array becomes one shared Constant."""
        value = self.values[name]
        if isinstance(value, Node):
            return value
        cached = self._constants.get(name)
        if cached is not None and cached[0] is value:  # an unrolled loop rebinds names per iteration
            return cached[1]
        try:
            ElemKind.from_dtype(value.dtype)
        except KeyError:
            raise UnsupportedOpError(
                f"tensor {name!r} has dtype {value.dtype}, which glow cannot hold at run time"
            ) from None
        constant = constant_node(self.fn.builder(), name, value)
        self._constants[name] = (value, constant)
        return constant

    def import_node(self, node: onnx.NodeProto) -> None:
        entry = IMPORTERS[node.op_type]
        builder = Builder(self.fn, prefix=f"{node.name or node.output[0]}/")
        ctx = NodeContext(node, self.opset, builder, self)
        inputs = [self.values[name] for name in node.input if name]
        behind = frozenset().union(*(self.inputs_behind(name) for name in node.input if name))
        try:
            if can_fold(entry.fold, inputs):
                given = {name: self.values[name] for name in node.input if name}
                results: ImportResult = fold_node(node, given, self.opset)  # type: ignore[arg-type]
            else:
                results = entry.fn(ctx)
        except ShapeError as err:
            raise ShapeError(f"ONNX node {ctx.name!r} ({node.op_type}): {err}") from None
        self._bind_outputs(ctx, results)
        for name in node.output:
            value = self.values.get(name) if name else None
            if isinstance(value, Node):
                # An If output is a node built by its branch: it depends on what the branch read.
                self._behind[name] = behind | self._node_behind.get(id(value), frozenset())
                self._node_behind[id(value)] = self._behind[name]
                self._recipes[name] = node

    def _bind_outputs(self, ctx: NodeContext, results: ImportResult) -> None:
        """Bind each output; one that is used but glow cannot produce is an error, unused ones are not."""
        listed = list(results) if isinstance(results, list | tuple) else [results]
        for index, name in enumerate(ctx.proto.output):
            missing = index >= len(listed) or listed[index] is None
            if not name or (missing and name not in self.used):
                continue
            if missing:
                raise ctx.refuse(
                    f"output {index} ({name!r}) is used by the model but glow cannot produce it "
                    "(only inference outputs are supported)"
                )
            self.values[name] = listed[index]  # type: ignore[assignment]

    def save_outputs(self, graph: onnx.GraphProto, source: str) -> None:
        b = self.fn.builder()
        for info in graph.output:
            if info.name not in self.values:
                raise ModelLoadError(f"{source}: graph output {info.name!r} is never produced; re-export it")
            if info.name in self.module.placeholders:
                raise GlowError(
                    f"graph output {info.name!r} is also a graph input; glow needs distinct names"
                )
            b.save(self.materialize(info.name), info.name)


__all__ = ["MIN_OPSET", "ValueResolver", "load_onnx"]
