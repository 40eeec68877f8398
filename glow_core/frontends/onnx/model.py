"""Reading an ONNX model: parse it, read its external data, check it, order its nodes, and
say what its graph inputs and outputs hold.

The loader builds glow graphs from what this module reads; the runtime (a Session, the host
partition) reads models with it too, without building anything, so these are public names.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, replace

import onnx

from glow_core.errors import ModelLoadError, UnsupportedOpError
from glow_core.frontends.onnx.registry import node_name
from glow_core.frontends.onnx.tensors import load_external_data, uses_external
from glow_core.frontends.onnx.validate import check_model

ModelSource = str | os.PathLike | bytes | onnx.ModelProto
"""A model as callers give it: a file path, serialized bytes or a parsed ModelProto."""


def element_name(name: str, index: int) -> str:
    """The placeholder of element ``index`` of sequence ``name`` (an input or an output)."""
    return f"{name}[{index}]"


def one_line(text: object) -> str:
    """``text`` with its line breaks and runs of spaces folded, for one-line error messages."""
    return " ".join(str(text).split())


def read_model(model: ModelSource, base_dir: str | os.PathLike | None = None) -> tuple[onnx.ModelProto, str]:
    """The parsed and checked model (``validate.check_model``), external data read in, and
    a description of where it came from (for error messages).

    External data is read from ``base_dir``, which defaults to the folder of a model file;
    a model given as bytes or a ModelProto has no folder, so one that references external
    data needs ``base_dir`` (never the working directory). A ModelProto is copied before
    its external data is read into it, so the caller's stays as it was.
    """
    proto, source, folder = _parse_model(model)
    if uses_external(proto):
        base = base_dir if base_dir is not None else folder
        if base is None:
            raise ModelLoadError(
                f"{source} keeps tensors in external data files, but a model given as bytes or a "
                "ModelProto has no folder to find them in; pass base_dir= (the folder holding the "
                "data files) to load_onnx / glow_core.compile / glow_core.load, or load it from its path"
            )
        if proto is model:
            proto = onnx.ModelProto()
            proto.CopyFrom(model)  # type: ignore[arg-type]
        load_external_data(proto, base)
    check_model(proto, source)
    return proto, source


def _parse_model(model: ModelSource) -> tuple[onnx.ModelProto, str, str | None]:
    """The model as parsed (external data not read), its description, and its file's folder."""
    if isinstance(model, onnx.ModelProto):
        return model, "ONNX model", None
    if isinstance(model, bytes | bytearray):
        source = "ONNX model bytes"
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as err:  # protobuf raises DecodeError and friends
            raise ModelLoadError(
                f"cannot parse {source}: {type(err).__name__}: {one_line(err)}; "
                "the data may be truncated or not an ONNX model, re-export it"
            ) from None
    else:
        path = os.fspath(model)
        source = f"ONNX model file {path!r}"
        if not os.path.isfile(path):
            raise ModelLoadError(f"{source} does not exist or is not a file")
        try:
            proto = onnx.load(path, load_external_data=False)
        except Exception as err:
            raise ModelLoadError(
                f"cannot read {source}: {type(err).__name__}: {one_line(err)}; "
                "the file may be truncated or not an ONNX model, re-export it"
            ) from None
        return proto, source, os.path.dirname(os.path.abspath(path))
    return proto, source, None


def all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of ``graph`` and of its subgraphs (If branches, loop and SequenceMap bodies,
    all imported inline)."""
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes.extend(all_nodes(attr.g))
    return nodes


def ordered_nodes(graph: onnx.GraphProto, source: str, outer: Collection[str] = ()) -> list[onnx.NodeProto]:
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
                f"{source}: tensor {missing!r} read by node {node_name(node)!r} "
                f"({node.op_type}) is never produced; the model is incomplete or cyclic, re-export it"
            )
        pending = waiting
    return order


@dataclass(frozen=True)
class DeclaredType:
    """What a graph input or output holds, in the forms glow takes: a tensor or a sequence of
    tensors, either maybe optional. ``tensor`` is the tensor's type (each element's for a
    sequence); ``declared`` is False for a value the model leaves untyped (run_node's outputs)."""

    tensor: onnx.TypeProto.Tensor
    sequence: bool = False
    optional: bool = False
    declared: bool = True

    def describe(self) -> str:
        what = "sequence of tensors" if self.sequence else "tensor"
        return f"an optional {what}" if self.optional else f"a {what}"


def _type_text(type_proto: onnx.TypeProto) -> str:
    """An ONNX type's kind in words, nested kinds included ("sequence of map")."""
    kind = type_proto.WhichOneof("value") or "untyped"
    name = kind.removesuffix("_type")
    if kind == "sequence_type":
        return f"{name} of {_type_text(type_proto.sequence_type.elem_type)}"
    if kind == "optional_type":
        return f"{name} of {_type_text(type_proto.optional_type.elem_type)}"
    return name


def declared_type(type_proto: onnx.TypeProto, what: str) -> DeclaredType:
    """The declared kind of a graph input or output (``what`` names it), or a refusal of the
    kinds glow has no form for (maps, sparse tensors, sequences of sequences...)."""
    kind = type_proto.WhichOneof("value")
    if kind is None:
        return DeclaredType(onnx.TypeProto.Tensor(), declared=False)
    if kind == "tensor_type":
        return DeclaredType(type_proto.tensor_type)
    element = type_proto.sequence_type.elem_type
    if kind == "sequence_type" and element.WhichOneof("value") in (None, "tensor_type"):
        return DeclaredType(element.tensor_type, sequence=True)
    if kind == "optional_type":
        inner = declared_type(type_proto.optional_type.elem_type, what)
        if inner.declared and not inner.optional:
            return replace(inner, optional=True)
    raise UnsupportedOpError(
        f"{what} is a {_type_text(type_proto)}; glow takes tensors, sequences of tensors "
        "and optionals of either"
    )
