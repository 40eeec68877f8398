"""``NodeContext``: the view of one ONNX node that importers work with (attributes,
inputs as nodes or load-time values, the errors that name the node and the input).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper

from glow_core.errors import ModelLoadError, ShapeError, UnsupportedOpError
from glow_core.frontends.onnx.tensors import tensor_array
from glow_core.frontends.onnx.values import (
    AnyValue,
    EmptyOptional,
    LoadTimeValueError,
    Rank,
    RankRule,
    Scope,
    SequenceValue,
    Value,
    as_rank,
    kind_of,
)
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind


def attribute_value(attr: AttributeProto) -> Any:
    """A Python value for an ONNX attribute: strings decoded, tensors as numpy arrays."""
    value = helper.get_attribute_value(attr)
    if attr.type == AttributeProto.TENSOR:
        return tensor_array(value, f"attribute {attr.name!r}")
    if attr.type == AttributeProto.STRING:
        return value.decode()
    if attr.type == AttributeProto.STRINGS:
        return [v.decode() for v in value]
    if attr.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        return list(value)
    return value


def elem_kind_of(elem_type: int, what: str) -> ElemKind:
    """The glow kind of an ONNX TensorProto element type, or a clear refusal."""
    try:
        return ElemKind.from_dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        kinds = ", ".join(k.name for k in ElemKind)
        known = elem_type in onnx.TensorProto.DataType.values()
        name = onnx.TensorProto.DataType.Name(elem_type) if known else f"#{elem_type}"
        raise UnsupportedOpError(
            f"{what} has element type {name}, which glow does not support ({kinds})"
        ) from None


def node_name(node: onnx.NodeProto) -> str:
    """What a node is called in messages: its name, else its first output, else its op type
    (a damaged node may have neither)."""
    return node.name or (node.output[0] if node.output else node.op_type)


class NodeContext:
    """One ONNX node being imported: its attributes, inputs and a builder for its nodes.

    Input accessors say what the importer needs (a node, a load-time value, a shape), so
    the error for an input glow cannot use names the node and the input in one place.
    """

    def __init__(self, proto: onnx.NodeProto, opset: int, builder: Builder, scope: Scope):
        self.proto = proto
        self.opset = opset
        self.b = builder
        self.name = node_name(proto)
        self.op_type = proto.op_type
        self.attrs = {a.name: attribute_value(a) for a in proto.attribute if a.type != AttributeProto.GRAPH}
        self.graphs = {a.name: a.g for a in proto.attribute if a.type == AttributeProto.GRAPH}
        self.scope = scope
        self._values = scope.values

    # ---- attributes and errors -------------------------------------------------------

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def required_attr(self, key: str) -> Any:
        if key not in self.attrs:
            raise self.refuse(f"required attribute {key!r} is missing")
        return self.attrs[key]

    def refuse(self, message: str) -> UnsupportedOpError:
        """An error (to raise) prefixed with this node's name and op type."""
        return UnsupportedOpError(f"ONNX node {self.name!r} ({self.op_type}): {message}")

    def invalid(self, message: str) -> ModelLoadError:
        """An error (to raise) for a node that breaks the ONNX spec (an attribute value out of
        its range, a list of the wrong length): the model is malformed, not merely unsupported."""
        return ModelLoadError(
            f"ONNX node {self.name!r} ({self.op_type}): {message}; the model breaks the ONNX spec, "
            "re-export it"
        )

    def int_attr(self, key: str, default: int, *, low: int | None = None) -> int:
        """An INT attribute, refused below ``low`` (a blocksize or window size of 0)."""
        value = int(self.attrs.get(key, default))
        if low is not None and value < low:
            raise self.invalid(f"attribute {key!r} is {value}, but ONNX requires {key} >= {low}")
        return value

    def flag_attr(self, key: str, default: int) -> bool:
        """A 0/1 INT attribute (keepdims, noop_with_empty_axes); another value is refused, since
        onnxruntime reads only 1 as true and onnx.reference any non-zero value."""
        value = int(self.attrs.get(key, default))
        if value not in (0, 1):
            raise self.invalid(f"attribute {key!r} is {value}, but ONNX allows only 0 or 1")
        return bool(value)

    def ints_attr(self, key: str, default: int, count: int, per: str, *, low: int | None = None) -> list[int]:
        """An INTS attribute holding ``count`` values, one per ``per`` ("spatial dim"), each at
        least ``low`` when given; absent, ``default`` repeated. Importers index strides,
        dilations and pads per dim, so a list of another length is refused here, by name."""
        values = [int(v) for v in self.attrs.get(key, [default] * count)]
        if len(values) != count:
            raise self.invalid(
                f"attribute {key!r} = {values} has {len(values)} values, but ONNX requires {count} "
                f"(one per {per})"
            )
        if low is not None and any(v < low for v in values):
            raise self.invalid(f"attribute {key!r} = {values}, but ONNX requires each {key} value >= {low}")
        return values

    def axis(self, value: int, rank: int, what: str) -> int:
        """``value`` (an axis, negative counting from the end) as a position in ``rank`` dims,
        refused when out of range; ``what`` names where it came from ("attribute 'axis'")."""
        if not -rank <= value < rank:
            allowed = f"{-rank} to {rank - 1}" if rank else "none: a scalar has no axes"
            raise ShapeError(f"{what} is {value}, out of range for rank {rank} (allowed: {allowed})")
        return value % rank

    def axis_attr(self, key: str, default: int, rank: int) -> int:
        """The axis attribute ``key`` normalized for a tensor of ``rank`` dims."""
        return self.axis(int(self.attrs.get(key, default)), rank, f"attribute {key!r}")

    def elem_attr(self, key: str, default: int | None = None) -> ElemKind:
        """An element-type attribute (``to``, ``dtype``, ``stash_type``) as a glow kind;
        UNDEFINED, unknown codes and types glow cannot hold are refused, naming the attribute."""
        code = self.attrs.get(key, default)
        if code is None:
            raise self.invalid(f"required attribute {key!r} is missing")
        return elem_kind_of(int(code), f"ONNX node {self.name!r} ({self.op_type}): attribute {key!r}")

    def check_ranks(self, rules: Sequence[tuple[int, Rank]]) -> None:
        """Refuse a present tensor input whose rank ``rules`` (the importer table's) forbid."""
        for index, rule in rules:
            if self.has(index):
                self.check_rank(index, rule)

    def check_shape(self, index: int, expected: Sequence[int], what: str) -> None:
        """Refuse input ``index`` unless it is present with shape ``expected`` (a ShapeError
        naming the input, ``what`` it is, and both shapes), when it is present."""
        if not self.has(index):
            return
        shape = self.shape(index)
        if shape != tuple(expected):
            raise ShapeError(
                f"input {index} ({what}, tensor {self.proto.input[index]!r}) has shape {list(shape)}, "
                f"but {self.op_type} needs {list(expected)} here"
            )

    def check_rank(self, index: int, rule: RankRule) -> None:
        """Refuse input ``index`` (a ShapeError naming it) unless its rank is ``rule``."""
        value = self.value(index)
        if isinstance(value, SequenceValue | EmptyOptional):
            return  # an input of the wrong kind is refused where its value is taken
        shape = tuple(value.shape) if isinstance(value, np.ndarray) else value.type.shape
        rank = as_rank(rule)
        if not rank.allows(len(shape)):
            raise ShapeError(
                f"input {index} ({self.proto.input[index]!r}) has shape {list(shape)}, rank {len(shape)}, "
                f"but {self.op_type} takes {rank} there"
            )

    def to_node(self, value: Value, label: str) -> Node:
        """A value as a graph node: a load-time array becomes a new Constant."""
        return value if isinstance(value, Node) else self.constant(np.asarray(value), label)

    def constant(self, array: np.ndarray, label: str) -> Node:
        """A new Constant computed by the importer (a pre-transposed weight, a zero bias)."""
        try:
            ElemKind.from_dtype(array.dtype)
        except KeyError:
            raise self.refuse(
                f"{label} has dtype {array.dtype}, which glow cannot hold at run time"
            ) from None
        return self.b.constant(array, f"{self.name}/{label}", dtype=array.dtype)

    @property
    def num_outputs(self) -> int:
        return len(self.proto.output)

    def output_requested(self, index: int) -> bool:
        return index < len(self.proto.output) and self.proto.output[index] != ""

    # ---- inputs ----------------------------------------------------------------------------

    def has(self, index: int) -> bool:
        """Whether optional input ``index`` is given (absent or named "" means not)."""
        return index < len(self.proto.input) and self.proto.input[index] != ""

    def input_names(self) -> list[str]:
        return [name for name in self.proto.input if name]

    def value(self, index: int) -> AnyValue:
        """The input as it is: a node, a load-time array, a sequence or an empty optional
        (Identity passes any of them on)."""
        if not self.has(index):
            raise self.refuse(f"required input {index} is missing")
        return self._values[self.proto.input[index]]

    def tensor(self, index: int) -> Value:
        """The input, refused unless it is a tensor (a node or a load-time array)."""
        value = self.value(index)
        if isinstance(value, SequenceValue | EmptyOptional):
            raise self.refuse(
                f"input {index} (tensor {self.proto.input[index]!r}) is {kind_of(value)}, "
                "where this op takes a tensor"
            )
        return value

    def sequence(self, index: int) -> SequenceValue:
        """The input, refused unless it is a sequence (whose length glow knows at load time)."""
        value = self.value(index)
        if not isinstance(value, SequenceValue):
            raise self.refuse(
                f"input {index} ({self.proto.input[index]!r}) is {kind_of(value)}, "
                "where this op takes a sequence"
            )
        return value

    def node(self, index: int, rank: RankRule | None = None) -> Node:
        """The input as a graph node (a load-time array becomes a Constant), refused unless
        its rank is ``rank`` when given (a rule that depends on another input or attribute)."""
        self.tensor(index)
        if rank is not None:
            self.check_rank(index, rank)
        try:
            return self.scope.materialize(self.proto.input[index])
        except UnsupportedOpError as err:
            raise self.refuse(str(err)) from None

    def optional_node(self, index: int) -> Node | None:
        return self.node(index) if self.has(index) else None

    def is_static(self, index: int) -> bool:
        return self.has(index) and isinstance(self._values[self.proto.input[index]], np.ndarray)

    def static(self, index: int, what: str) -> np.ndarray:
        """The input's load-time value; refuses inputs computed at run time."""
        value = self.tensor(index)
        if not isinstance(value, np.ndarray):
            name = self.proto.input[index]
            known = self.scope.known_value(name)
            if known is not None:  # float math on constants stays in the graph, but is computable
                return known
            behind = sorted(self.scope.inputs_behind(name))
            hint = f"pass load_onnx(static_inputs=...) values for {behind}, " if behind else ""
            raise LoadTimeValueError(
                f"ONNX node {self.name!r} ({self.op_type}): input {index} ({what}, tensor {name!r}) "
                f"must be a constant known at load time, but it is computed at run time; {hint}"
                "export the model with static shapes or fold it (e.g. onnxsim) first",
                behind,
            )
        return value

    def ints(self, index: int, what: str) -> list[int]:
        """A load-time 1-D integer input (shape, axes, pads, starts...) as a list; an input of
        another element type (a float NaN where ONNX requires int64) is refused."""
        array = self.static(index, what)
        if array.dtype.kind not in "iu":
            raise self.refuse(
                f"input {index} ({what}, tensor {self.proto.input[index]!r}) has element type "
                f"{array.dtype}, but ONNX requires integers here; re-export the model"
            )
        return [int(v) for v in array.reshape(-1)]

    def scalar(self, index: int, what: str) -> Any:
        """A load-time single-element input (Clip bounds, Pad value) as a Python scalar."""
        array = self.static(index, what)
        if array.size != 1:
            raise self.refuse(f"input {index} ({what}) must hold one value, got shape {array.shape}")
        return array.reshape(-1)[0].item()

    def int_scalar(self, index: int, what: str) -> int:
        """A load-time single-element count or index (TopK's K, OneHot's depth, an axis) as an
        int; a complex, NaN or infinite value is refused (OneHot's depth may be a float)."""
        value = self.scalar(index, what)
        if isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
            return int(value)
        raise self.refuse(f"input {index} ({what}) is {value!r}, but it must be a finite integer")

    def shape(self, index: int) -> tuple[int, ...]:
        value = self.tensor(index)
        return tuple(value.shape) if isinstance(value, np.ndarray) else value.type.shape
