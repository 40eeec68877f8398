"""``load_onnx``: read an ONNX model and build one glow Function from it.

Everything that can be checked before building is checked first (readable file, opset,
every op supported), so a model glow cannot run fails in one line naming the cause, not
half-way through with a partial graph. Shapes come from glow's own type rules as nodes are
built; declared intermediate shapes in the model are never trusted.

Sequences and optionals are load-time structure (``ops_sequence.py``): a sequence input
becomes one placeholder per element, named ``name[i]``, and so does a sequence output, so
the compiled function still takes and returns tensors only; ``load_onnx_structured`` says
where each graph output landed.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import onnx
from onnx import version_converter

from glow_core.errors import ModelLoadError, UnsupportedOpError
from glow_core.frontends.onnx import ops_sequence  # noqa: F401 - registers the sequence importers
from glow_core.frontends.onnx.deferred import model_for_import
from glow_core.frontends.onnx.graph_import import (
    GraphImport,
    InputShape,
    OutputPlaces,
    StaticValue,
    ValueResolver,
)
from glow_core.frontends.onnx.model import ModelSource, all_nodes, one_line, ordered_nodes
from glow_core.frontends.onnx.registry import IMPORTERS, node_name
from glow_core.graph.function import Module
from glow_core.limits import MemoryLimits, memory_limits

MIN_OPSET = 7
_DEFAULT_DOMAINS = ("", "ai.onnx")
_SUPPORTED_HINT = "supported ops: see glow_core.frontends.onnx.SUPPORTED_OPS"


@dataclass(frozen=True)
class LoadedModel:
    """A loaded model and, per graph output (in graph order), where its value lands."""

    module: Module
    outputs: dict[str, OutputPlaces]


def load_onnx(
    model: ModelSource,
    input_shapes: Mapping[str, InputShape] | None = None,
    static_inputs: Mapping[str, StaticValue] | None = None,
    resolve: ValueResolver | None = None,
    *,
    base_dir: str | os.PathLike | None = None,
    limits: MemoryLimits | None = None,
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

    A sequence input needs its length and element shapes: ``input_shapes`` gives one shape
    per element (``[]`` for an empty sequence), and element ``i`` becomes the placeholder
    ``element_name(name, i)``. An optional input is absent when ``input_shapes`` gives None
    for it, present otherwise. A sequence output becomes one output per element, named the
    same way (see ``load_onnx_structured``).

    ``base_dir`` is the folder external data files are read from (default: a model file's
    own folder; bytes and ModelProtos have none, so they need it when they use external
    data); files outside it are refused. ``limits`` replaces the memory budget in force
    (``glow_core.limits``) while loading: a tensor over it is refused before allocation.
    """
    return load_onnx_structured(
        model, input_shapes, static_inputs, resolve, base_dir=base_dir, limits=limits
    ).module


def load_onnx_structured(
    model: ModelSource,
    input_shapes: Mapping[str, InputShape] | None = None,
    static_inputs: Mapping[str, StaticValue] | None = None,
    resolve: ValueResolver | None = None,
    *,
    base_dir: str | os.PathLike | None = None,
    limits: MemoryLimits | None = None,
) -> LoadedModel:
    """``load_onnx``, saying also where each graph output lands: what a caller needs to give
    a sequence output back as a list and an empty optional as None (``glow_core.load`` does)."""
    with memory_limits(limits):
        return _load(model, input_shapes, static_inputs, resolve, base_dir)


def _load(
    model: ModelSource,
    input_shapes: Mapping[str, InputShape] | None,
    static_inputs: Mapping[str, StaticValue] | None,
    resolve: ValueResolver | None,
    base_dir: str | os.PathLike | None,
) -> LoadedModel:
    # A file or bytes is read with its weights deferred (each read when its array is made),
    # so the import holds every weight once; a caller's ModelProto is read as it is.
    with model_for_import(model, base_dir, MIN_OPSET) as (proto, source, weights):
        proto, opset = _upgrade(proto, _default_opset(proto, source), source)
        _check_supported(proto.graph, proto, opset)
        nodes = ordered_nodes(proto.graph, source)
        module = Module(proto.graph.name or "onnx_model")
        state = GraphImport(module, opset, _used_tensors(proto.graph), source, resolve)
        state.add_inputs(proto.graph, dict(input_shapes or {}), dict(static_inputs or {}), weights)
    for node in nodes:
        state.import_node(node)
    return LoadedModel(module, state.save_outputs(proto.graph, source))


# ---- reading and checking the model ------------------------------------------------------


def _default_opset(proto: onnx.ModelProto, source: str) -> int:
    """The default domain's opset; a model of other domains only (``ai.onnx.ml``,
    ``ai.onnx.preview.training``) needs none, and gets the newest onnx knows."""
    versions = [op.version for op in proto.opset_import if op.domain in _DEFAULT_DOMAINS]
    if versions:
        return max(versions)
    default_nodes = [n for n in all_nodes(proto.graph) if n.domain in _DEFAULT_DOMAINS]
    if default_nodes:
        node = default_nodes[0]
        raise ModelLoadError(
            f"{source} uses default-domain op {node.op_type!r} (node {node_name(node)!r}) "
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
            f"and onnx's version converter could not upgrade it ({type(err).__name__}: {one_line(err)}); "
            "re-export it with a newer opset"
        ) from None
    return converted, MIN_OPSET


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
    bad = [n for n in all_nodes(graph) if not _has_importer(n)]
    if not bad:
        return
    first = bad[0]
    version = opset if first.domain in _DEFAULT_DOMAINS else domain_opsets.get(first.domain, "?")
    others = sorted(
        {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in bad[1:]} - {first.op_type}
    )
    more = f" (also unsupported in this model: {', '.join(others)})" if others else ""
    raise UnsupportedOpError(
        f"ONNX op {first.op_type!r} (node {node_name(first)!r}, domain {first.domain!r}, "
        f"opset {version}) is not supported by glow; {_SUPPORTED_HINT}{more}"
    )


def _used_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors some node (here or in a subgraph) reads or the graph returns: they must be produced."""
    used = {v.name for v in graph.output}
    for node in graph.node:
        used.update(name for name in node.input if name)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                used |= _used_tensors(attr.g)
    return used


__all__ = [
    "MIN_OPSET",
    "LoadedModel",
    "OutputPlaces",
    "ValueResolver",
    "load_onnx",
    "load_onnx_structured",
]
