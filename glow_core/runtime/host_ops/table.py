"""The host op table: how an ONNX op declares that it runs on the host, and how it is found.

Each op is declared once (``@host_op``): when a node runs on the host (``claims``), what
its attributes mean (``prepare``, run once per model so a bad attribute fails when the
model is opened) and what it computes (the kernel ``prepare`` returns, with the ONNX
element type of each output). The ops themselves live beside this module, one file per
family (strings, LabelEncoder, ImageDecoder).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from glow_core.errors import ShapeError, UnsupportedOpError
from glow_core.frontends.onnx.string_values import as_strings, objects

ML_DOMAIN = "ai.onnx.ml"


@dataclass(frozen=True)
class HostNode:
    """One ONNX node as the host sees it: decoded attributes and which inputs hold strings."""

    proto: onnx.NodeProto
    attrs: Mapping[str, Any]
    string_inputs: tuple[bool, ...]
    """Per position of ``proto.input``: whether that tensor is a string tensor."""

    @property
    def name(self) -> str:
        return self.proto.name or (self.proto.output[0] if self.proto.output else self.proto.op_type)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def refuse(self, message: str) -> UnsupportedOpError:
        """An error (to raise) that names this node and its op type."""
        return UnsupportedOpError(f"ONNX node {self.name!r} ({self.proto.op_type}): {message}")

    def string_input(self, index: int) -> bool:
        return index < len(self.string_inputs) and self.string_inputs[index]


Kernel = Callable[[list[np.ndarray | None]], list[np.ndarray]]


@dataclass(frozen=True)
class Prepared:
    """A host node ready to run: the kernel and the ONNX element type of each output."""

    run: Kernel
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class HostOp:
    """A table entry: the op, when a node of it runs on the host, and how it is prepared."""

    op_type: str
    domain: str
    claims: Callable[[HostNode], bool]
    prepare: Callable[[HostNode], Prepared]


HOST_OPS: dict[tuple[str, str], HostOp] = {}
"""(domain, op type) -> entry; the default domain is ""."""


def _always(node: HostNode) -> bool:
    return True


def host_op(
    op_type: str, *, domain: str = "", claims: Callable[[HostNode], bool] = _always
) -> Callable[[Callable[[HostNode], Prepared]], Callable[[HostNode], Prepared]]:
    """Register ``prepare`` as the host implementation of ``op_type`` (refusing a second one)."""

    def register(prepare: Callable[[HostNode], Prepared]) -> Callable[[HostNode], Prepared]:
        if (domain, op_type) in HOST_OPS:
            raise TypeError(f"host op {op_type!r} of domain {domain!r} is declared twice")
        HOST_OPS[(domain, op_type)] = HostOp(op_type, domain, claims, prepare)
        return prepare

    return register


def host_op_for(node: onnx.NodeProto) -> HostOp | None:
    """The entry for ``node``'s op type, whatever runs it (``claims`` decides)."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return HOST_OPS.get((domain, node.op_type))


def always_host(node: onnx.NodeProto) -> bool:
    """Whether ``node`` runs on the host whatever its inputs are (a string or image op)."""
    entry = host_op_for(node)
    return entry is not None and entry.claims is _always


def host_op_names() -> list[str]:
    """The op types the host runs, for messages and docs."""
    return sorted({op for _, op in HOST_OPS})


def decode_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Attributes as Python values: strings decoded, tensors as numpy arrays (strings as str)."""
    attrs: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            continue
        value = helper.get_attribute_value(attr)
        if attr.type == AttributeProto.TENSOR:
            value = numpy_helper.to_array(value)
        elif attr.type == AttributeProto.STRING:
            value = value.decode("utf-8")
        elif attr.type == AttributeProto.STRINGS:
            value = [v.decode("utf-8") for v in value]
        elif attr.type in (AttributeProto.INTS, AttributeProto.FLOATS):
            value = list(value)
        attrs[attr.name] = value
    return attrs


def elementwise(node: HostNode, fn: Callable[[Any, Any], Any], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``fn`` on every pair of elements of ``x`` and ``y`` broadcast numpy-style (an object array)."""
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ShapeError(
            f"ONNX node {node.name!r} ({node.proto.op_type}): shapes {x.shape} and {y.shape} do not broadcast"
        ) from None
    return objects(np.frompyfunc(fn, 2, 1)(x, y), shape)


def text_input(node: HostNode, value: np.ndarray | None, index: int) -> np.ndarray:
    if value is None:
        raise node.refuse(f"required input {index} is missing")
    return as_strings(np.asarray(value), f"input {index} of ONNX node {node.name!r} ({node.proto.op_type})")
