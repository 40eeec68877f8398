"""Building a glow Module from a checked ONNX graph: inputs, nodes (through the importer
table), load-time values and outputs.

``loader.py`` is the front door (read, upgrade, check every op is supported) and hands the
graph to ``GraphImport``; control-flow importers call back into it for subgraphs (If
branches, Loop and Scan bodies), which are imported inline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from glow_core.errors import (
    GlowError,
    InputError,
    MemoryLimitError,
    ModelLoadError,
    ShapeError,
    ShapeNeededError,
    UnsupportedOpError,
)
from glow_core.frontends.onnx.deferred import DeferredWeights
from glow_core.frontends.onnx.fold import can_fold, fold_node
from glow_core.frontends.onnx.model import DeclaredType, declared_type, element_name, ordered_nodes
from glow_core.frontends.onnx.registry import (
    EMPTY_OPTIONAL,
    IMPORTERS,
    AnyValue,
    EmptyOptional,
    ImportResult,
    NodeContext,
    SequenceValue,
    elem_kind_of,
    kind_of,
    node_name,
)
from glow_core.frontends.onnx.tensors import tensor_array
from glow_core.graph.builder import Builder
from glow_core.graph.function import Module
from glow_core.graph.node import Node, Placeholder
from glow_core.limits import current_limits
from glow_core.types import ElemKind

ValueResolver = Callable[[Module, Node, str], np.ndarray]
"""Computes a value glow needs at load time (a condition, a shape) that the graph computes
from its inputs: called with the module built so far, the value's node and its ONNX name."""

InputShape = Sequence[int] | Sequence[Sequence[int]] | None
"""``input_shapes`` for one input: a tensor's dims, a sequence's dims per element, or None
for an optional input that is absent."""

StaticValue = np.ndarray | Sequence[np.ndarray] | None
"""``static_inputs`` for one input: a tensor, a sequence's elements, or None (an absent optional)."""

OutputPlaces = str | tuple[str, ...] | None
"""Where a graph output lands in the module: the output placeholder of a tensor, those of a
sequence's elements in order, or None for an empty optional (nothing to compute)."""


def _input_shape(
    name: str, tensor: onnx.TypeProto.Tensor, override: Sequence[int] | None, label: str
) -> tuple[int, ...]:
    """Concrete dims of input tensor ``name``: ``override`` (``label`` names where it was
    given) first, else declared, batch -> 1."""
    declared = tensor.shape.dim if tensor.HasField("shape") else None
    if override is not None:
        shape = tuple(int(d) for d in override)
        if declared is not None and len(declared) != len(shape):
            raise InputError(
                f"{label} = {list(shape)} has rank {len(shape)}, but the model declares rank {len(declared)}"
            )
        if any(d < 0 for d in shape):
            raise InputError(f"{label} = {list(shape)} has a negative dimension")
        return shape
    if declared is None:
        raise ShapeNeededError(f"input {name!r} declares no shape", name)
    dims = []
    for axis, dim in enumerate(declared):
        if dim.HasField("dim_value") and dim.dim_value < 0:
            raise ModelLoadError(
                f"input {name!r} dimension {axis} is {dim.dim_value}, negative; re-export the model"
            )
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif axis == 0:
            dims.append(1)
        else:
            text = f"symbolic ({dim.dim_param!r})" if dim.dim_param else "unknown"
            raise ShapeNeededError(f"input {name!r} dimension {axis} is {text}", name)
    return tuple(dims)


def _element_shapes(name: str, given: object) -> list[Sequence[int]]:
    """``input_shapes`` of sequence input ``name``: one shape per element, checked to be so."""
    shapes = list(given) if isinstance(given, Sequence) and not isinstance(given, str) else None
    if shapes is None or not all(isinstance(s, Sequence) and not isinstance(s, str) for s in shapes):
        raise InputError(
            f"input_shapes[{name!r}] = {given!r}: input {name!r} is a sequence, so give one shape "
            "per element (a list of shapes, [] for an empty sequence)"
        )
    return shapes


def _static_tensor(label: str, tensor: onnx.TypeProto.Tensor, value: object) -> np.ndarray:
    """A value given in ``static_inputs`` (``label`` says where), checked against ``tensor``."""
    array = np.asarray(value)
    if tensor.elem_type and array.dtype != helper.tensor_dtype_to_np_dtype(tensor.elem_type):
        raise InputError(
            f"{label} has dtype {array.dtype}, but the model declares "
            f"{helper.tensor_dtype_to_np_dtype(tensor.elem_type)}"
        )
    if tensor.HasField("shape") and len(tensor.shape.dim) != array.ndim:
        declared = len(tensor.shape.dim)
        raise InputError(f"{label} has rank {array.ndim}, but the model declares rank {declared}")
    return array


def _static_input(name: str, declared: DeclaredType, value: StaticValue) -> AnyValue:
    """A value given for an input in ``static_inputs``: a tensor, a sequence's elements, or
    None for an absent optional."""
    label = f"static_inputs[{name!r}]"
    if value is None:
        if not declared.optional:
            raise InputError(f"{label} is None, but input {name!r} is {declared.describe()}, not optional")
        return EMPTY_OPTIONAL
    if not declared.sequence:
        return _static_tensor(label, declared.tensor, value)
    if not isinstance(value, list | tuple):
        raise InputError(f"{label}: input {name!r} is a sequence, so give a list of arrays")
    return SequenceValue(_static_tensor(f"{label}[{i}]", declared.tensor, v) for i, v in enumerate(value))


class GraphImport:
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
        self.values: dict[str, AnyValue] = {}
        self.runtime_inputs: set[str] = set()
        self._constants: dict[str, tuple[np.ndarray, Node]] = {}
        self._behind: dict[str, frozenset[str]] = {}
        self._recipes: dict[str, onnx.NodeProto] = {}
        self._node_behind: dict[int, frozenset[str]] = {}
        self._known: dict[str, np.ndarray | None] = {}

    def add_inputs(
        self,
        graph: onnx.GraphProto,
        overrides: dict[str, InputShape],
        static: dict[str, StaticValue],
        weights: DeferredWeights | None = None,
    ) -> None:
        """Placeholders for real inputs; initializers and static inputs stay arrays until needed.
        ``weights`` reads the initializers ``graph`` holds as stubs (``deferred.py``)."""
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
        self.runtime_inputs = {info.name for info in real if info.name not in static}
        for info in real:
            declared = declared_type(info.type, f"input {info.name!r}")
            if not declared.declared:
                raise UnsupportedOpError(f"input {info.name!r} is untyped; glow needs its element type")
            if info.name in static:
                self.values[info.name] = _static_input(info.name, declared, static[info.name])
                continue
            self.values[info.name] = self._input_value(info.name, declared, overrides)
            self._behind[info.name] = frozenset([info.name])
        for tensor in graph.initializer:
            where = f"initializer {tensor.name!r}"
            if weights is not None and tensor.name in weights:
                self.values[tensor.name] = weights.array(tensor.name, where)
            else:
                self.values[tensor.name] = tensor_array(tensor, where)

    def _input_value(self, name: str, declared: DeclaredType, overrides: dict[str, InputShape]) -> AnyValue:
        """A run-time input: one placeholder, one per element of a sequence, or an absent optional."""
        if declared.optional and name in overrides and overrides[name] is None:
            return EMPTY_OPTIONAL
        if not declared.sequence:
            given = overrides.get(name)
            return self._placeholder(name, name, declared.tensor, given, f"input_shapes[{name!r}]")  # type: ignore[arg-type]
        if name not in overrides:
            raise ModelLoadError(
                f"input {name!r} is a sequence, whose length and element shapes come with each call: "
                f"run the model with glow_core.load, or pass input_shapes={{{name!r}: [[...], ...]}}"
            )
        shapes = _element_shapes(name, overrides[name])
        labels = [f"input_shapes[{name!r}][{i}]" for i in range(len(shapes))]
        return SequenceValue(
            self._placeholder(element_name(name, i), name, declared.tensor, shape, label)
            for i, (shape, label) in enumerate(zip(shapes, labels, strict=True))
        )

    def _placeholder(
        self, name: str, owner: str, tensor: onnx.TypeProto.Tensor, shape: Sequence[int] | None, label: str
    ) -> Placeholder:
        """Placeholder ``name`` for graph input ``owner`` (the input itself or its sequence)."""
        elem = elem_kind_of(tensor.elem_type, f"input {owner!r}")
        dims = _input_shape(owner, tensor, shape, label)
        current_limits().check_tensor(
            f"input {name!r} (as declared, or given in input_shapes)", dims, elem.itemsize
        )
        node = self.fn.builder().placeholder(name, dims, elem)
        self._node_behind[id(node)] = frozenset([owner])
        return node

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
        except MemoryLimitError:
            raise  # over the budget is an answer, not "cannot compute"
        except ShapeError:
            return None
        for output, result in zip(node.output, results, strict=False):
            self._known[output] = result
        return self._known[name]

    def import_graph(self, graph: onnx.GraphProto, inputs: Sequence[AnyValue] = ()) -> list[AnyValue]:
        """Import a subgraph inline (an If branch, one unrolled loop iteration, one SequenceMap step).

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
            self._behind[info.name] = self._behind_of(value)
        self._known.clear()
        for tensor in graph.initializer:
            self.values[tensor.name] = tensor_array(tensor, f"initializer {tensor.name!r}")
        for node in ordered_nodes(graph, self.source, outer=self.values.keys()):
            self.import_node(node)
        missing = [v.name for v in graph.output if v.name not in self.values]
        if missing:
            raise ModelLoadError(f"{self.source}: subgraph {graph.name!r} never produces {missing}")
        return [self.values[v.name] for v in graph.output]

    def _behind_of(self, value: AnyValue) -> frozenset[str]:
        """The graph inputs a value is computed from (for a sequence, those of its elements)."""
        if isinstance(value, SequenceValue):
            return frozenset().union(*(self._behind_of(v) for v in value))
        return self._node_behind.get(id(value), frozenset()) if isinstance(value, Node) else frozenset()

    def materialize(self, name: str) -> Node:
        """The tensor ``name`` as a node; a load-time array becomes one shared Constant."""
        value = self.values[name]
        if isinstance(value, SequenceValue | EmptyOptional):
            raise UnsupportedOpError(f"{name!r} is {kind_of(value)}, where a tensor is needed")
        if isinstance(value, Node):
            return value
        cached = self._constants.get(name)
        if cached is not None and cached[0] is value:  # an unrolled loop rebinds names per iteration
            return cached[1]
        constant = self._constant(name, value)
        self._constants[name] = (value, constant)
        return constant

    def _constant(self, name: str, value: np.ndarray) -> Node:
        try:
            ElemKind.from_dtype(value.dtype)
        except KeyError:
            raise UnsupportedOpError(
                f"tensor {name!r} has dtype {value.dtype}, which glow cannot hold at run time"
            ) from None
        return self.fn.builder().constant(value, name, dtype=value.dtype)

    def import_node(self, node: onnx.NodeProto) -> None:
        entry = IMPORTERS[node.op_type]
        builder = Builder(self.fn, prefix=f"{node_name(node)}/")
        ctx = NodeContext(node, self.opset, builder, self)
        inputs = [self.values[name] for name in node.input if name]
        behind = frozenset().union(*(self.inputs_behind(name) for name in node.input if name))
        try:
            ctx.check_ranks(entry.ranks)
            if can_fold(entry.fold, inputs):
                given = {name: self.values[name] for name in node.input if name}
                results: ImportResult = fold_node(node, given, self.opset)  # type: ignore[arg-type]
            else:
                results = entry.fn(ctx)
        except ShapeError as err:
            raise err.__class__(f"ONNX node {ctx.name!r} ({node.op_type}): {err}") from None
        self._bind_outputs(ctx, results)
        for name in node.output:
            value = self.values.get(name) if name else None
            if isinstance(value, Node):
                # An If output is a node built by its branch: it depends on what the branch read.
                self._behind[name] = behind | self._node_behind.get(id(value), frozenset())
                self._node_behind[id(value)] = self._behind[name]
                self._recipes[name] = node
            elif isinstance(value, SequenceValue):
                self._behind[name] = behind | self._behind_of(value)

    def _bind_outputs(self, ctx: NodeContext, results: ImportResult) -> None:
        """Bind each output; one that is used but glow cannot produce is an error, unused ones are not."""
        several = isinstance(results, list | tuple) and not isinstance(results, SequenceValue)
        listed = list(results) if several else [results]  # type: ignore[arg-type]
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

    def save_outputs(self, graph: onnx.GraphProto, source: str) -> dict[str, OutputPlaces]:
        """Save every graph output; where each landed (see ``OutputPlaces``)."""
        places: dict[str, OutputPlaces] = {}
        for info in graph.output:
            if info.name not in self.values:
                raise ModelLoadError(f"{source}: graph output {info.name!r} is never produced; re-export it")
            if info.name in self.module.placeholders or info.name in self.runtime_inputs:
                raise GlowError(
                    f"graph output {info.name!r} is also a graph input; glow needs distinct names"
                )
            declared = declared_type(info.type, f"graph output {info.name!r}")
            places[info.name] = self._save(info.name, declared, self.values[info.name])
        return places

    def _save(self, name: str, declared: DeclaredType, value: AnyValue) -> OutputPlaces:
        """Save one output: a tensor under its name, a sequence's elements as ``name[i]``."""
        produced = "a sequence" if isinstance(value, SequenceValue) else kind_of(value)
        fits = {
            "a sequence": declared.sequence,
            "an empty optional": declared.optional,
            "a tensor": not declared.sequence,
        }
        if declared.declared and not fits[produced]:
            raise GlowError(
                f"graph output {name!r} is {produced}, but the model declares {declared.describe()}"
            )
        b = self.fn.builder()
        if isinstance(value, EmptyOptional):
            return None
        if isinstance(value, SequenceValue):
            names = tuple(self.module.unique_name(element_name(name, i)) for i in range(len(value)))
            for item_name, item in zip(names, value, strict=True):
                b.save(item if isinstance(item, Node) else self._constant(item_name, item), item_name)
            return names
        b.save(self.materialize(name), name)
        return name
