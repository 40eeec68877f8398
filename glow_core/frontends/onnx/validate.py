"""Up-front checks of a parsed ONNX model, before anything is built from it.

ONNX models are protobufs: any field may hold anything. These are the facts the importers
rely on, each checked once here so an importer never meets a malformed model half-way:

- versions: ``ir_version`` and each domain's opset no newer than the installed onnx knows
  (onnxruntime refuses both too: "Unsupported model IR version", "Opset N is under
  development"); an op used at an opset older than the op itself is refused as ORT does;
- structure: a graph with outputs, listed once each; every tensor written by one node
  only, never also a graph input or initializer (ORT: "Duplicate definition of name");
- attributes, against the op's schema in ``onnx.defs`` for the model's opset: no unknown
  names (ORT: "Unrecognized attribute", e.g. AveragePool ``dilations`` before opset 19),
  the declared type, required ones present;
- inputs and outputs, against the same schema: their counts within the op's bounds, every
  required input named (ORT refuses both), and every name and string UTF-8 text;
- tensors: every initializer and attribute tensor by ``tensors.check_tensor``.

Errors are ModelLoadError (a malformed model) naming the node or tensor and the graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx
from onnx import AttributeProto, defs

from glow_core.errors import ModelLoadError
from glow_core.frontends.onnx.tensors import check_tensor, model_tensors

DEFAULT_DOMAINS = ("", "ai.onnx")


def check_model(model: onnx.ModelProto, source: str) -> None:
    """Refuse ``model`` (ModelLoadError) if it breaks any rule of the module docstring."""
    _check_versions(model, source)
    graph = model.graph
    if not model.HasField("graph") or not graph.output:
        raise ModelLoadError(
            f"{source} has no graph or no graph outputs (an empty model computes nothing); "
            "it may be truncated, re-export it"
        )
    opsets = domain_opsets(model)
    _check_graph(graph, source, opsets, top=True)
    for tensor, where in model_tensors(graph):
        check_tensor(tensor, f"{source}: {where}")


def domain_opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Each imported domain's opset, the default domain under ""."""
    opsets = {op.domain or "": op.version for op in model.opset_import}
    if "ai.onnx" in opsets:
        opsets[""] = max(opsets.pop("ai.onnx"), opsets.get("", 0))
    return opsets


def _check_versions(model: onnx.ModelProto, source: str) -> None:
    if model.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(
            f"{source} has IR version {model.ir_version}, newer than the newest this onnx "
            f"{onnx.__version__} supports ({onnx.IR_VERSION}); onnxruntime refuses it too. "
            "Re-export it with an older IR version or upgrade onnx"
        )
    known = defs.C.schema_version_map()
    for op in model.opset_import:
        domain = "" if op.domain in DEFAULT_DOMAINS else op.domain
        if domain in known and op.version > known[domain][1]:
            raise ModelLoadError(
                f"{source} imports opset {op.version} of domain {op.domain or 'ai.onnx'!r}, newer than "
                f"the newest this onnx {onnx.__version__} knows ({known[domain][1]}); onnxruntime "
                "refuses it too. Re-export it with a released opset"
            )
        if op.version < 1 and domain in known:
            raise ModelLoadError(
                f"{source} imports opset {op.version} of domain {op.domain!r}; opsets start at 1"
            )


def _node_label(node: onnx.NodeProto) -> str:
    return f"node {node.name or (node.output[0] if node.output else '?')!r} ({node.op_type})"


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _check_graph(graph: onnx.GraphProto, source: str, opsets: Mapping[str, int], top: bool = False) -> None:
    """Structure and attributes of ``graph`` and, recursively, of its subgraphs."""
    where = source if top else f"{source}: subgraph {graph.name!r}"
    _check_outputs(graph, where)
    _check_single_writers(graph, where)
    for node in graph.node:
        check_node(node, opsets, where)
        for sub in _subgraphs(node):
            _check_graph(sub, f"{source}: {_node_label(node)}", opsets)


def _check_outputs(graph: onnx.GraphProto, where: str) -> None:
    seen: set[str] = set()
    for info in graph.output:
        if not info.name:
            raise ModelLoadError(f"{where}: a graph output has no name; re-export the model")
        if info.name in seen:
            raise ModelLoadError(
                f"{where}: graph output {info.name!r} is listed twice; each output must be listed once "
                "(to return a value twice, add an Identity node and output its result under another name)"
            )
        seen.add(info.name)


def _check_single_writers(graph: onnx.GraphProto, where: str) -> None:
    """Every tensor name is defined once: by a graph input or initializer, or by one node."""
    writers: dict[str, str] = {v.name: f"graph input {v.name!r}" for v in graph.input}
    writers.update((t.name, f"initializer {t.name!r}") for t in graph.initializer if t.name not in writers)
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in writers:
                raise ModelLoadError(
                    f"{where}: tensor {name!r} has two definitions, {writers[name]} and "
                    f"{_node_label(node)}; ONNX allows one (SSA), re-export the model"
                )
            writers[name] = _node_label(node)


def check_node(node: onnx.NodeProto, opsets: Mapping[str, int], where: str) -> None:
    """``node``'s attributes, inputs and outputs against its op's schema at the model's opset
    of its domain.

    An op onnx has no schema for in that domain (glow's few preview ops) is left to its
    importer; one that exists only in newer opsets than the model's is refused. String
    attributes of every node must be UTF-8 text (importers compare them with names).
    """
    _check_text(node, where)
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    if domain not in opsets or not defs.has(node.op_type, domain):
        return
    version = opsets[domain]
    try:
        schema = defs.get_schema(node.op_type, version, domain)
    except defs.SchemaError:
        raise ModelLoadError(
            f"{where}: {_node_label(node)}: op {node.op_type!r} does not exist at opset {version} of "
            f"domain {domain or 'ai.onnx'!r} (it was added in a later opset); onnxruntime refuses "
            "it too, re-export the model with a newer opset"
        ) from None
    label = f"{where}: {_node_label(node)}"
    given: set[str] = set()
    for attr in node.attribute:
        if attr.name in given:
            raise ModelLoadError(f"{label}: attribute {attr.name!r} is given twice")
        given.add(attr.name)
        declared = schema.attributes.get(attr.name)
        if declared is None:
            allowed = ", ".join(sorted(schema.attributes)) or "none"
            raise ModelLoadError(
                f"{label}: unknown attribute {attr.name!r} for {node.op_type} at opset "
                f"{schema.since_version}+ (allowed: {allowed}); onnxruntime refuses it too, "
                "re-export the model or remove the attribute"
            )
        if attr.ref_attr_name:
            continue  # inside a function body: the value comes from the caller
        if attr.type != int(declared.type):
            raise ModelLoadError(
                f"{label}: attribute {attr.name!r} has type {_attr_type(attr.type)}, but "
                f"{node.op_type} declares {_attr_type(int(declared.type))}; re-export the model"
            )
    missing = sorted(n for n, a in schema.attributes.items() if a.required and n not in given)
    if missing:
        raise ModelLoadError(f"{label}: required attribute(s) {missing} missing; re-export the model")
    _check_arity(node, schema, label)


_OUTPUT_COUNTS = {("Split", "num_outputs")}
"""Attributes that state a node's output count."""


def _check_arity(node: onnx.NodeProto, schema: defs.OpSchema, label: str) -> None:
    """Input and output counts within the schema's bounds, and every required input named
    (importers take an input's position for granted: Max of no inputs has no first one)."""
    for what, names, low, high in (
        ("inputs", node.input, schema.min_input, schema.max_input),
        ("outputs", node.output, schema.min_output, schema.max_output),
    ):
        if not low <= len(names) <= high:
            bounds = f"at least {low}" if high >= 2**31 - 1 else f"{low} to {high}"
            bounds = f"{low}" if low == high else bounds
            raise ModelLoadError(
                f"{label}: {len(names)} {what} given, but {node.op_type} takes {bounds}; "
                "onnxruntime refuses it too, re-export the model"
            )
    for attr in node.attribute:
        if (node.op_type, attr.name) in _OUTPUT_COUNTS and attr.i != len(node.output):
            # Checked here, before anything runs onnx's shape inference on the node: its C++
            # asserts on the mismatch and aborts the whole process.
            raise ModelLoadError(
                f"{label}: attribute {attr.name!r} is {attr.i}, but the node has {len(node.output)} "
                "outputs; ONNX requires them to be equal, re-export the model"
            )
    option = defs.OpSchema.FormalParameterOption
    for index, formal in enumerate(schema.inputs):
        if formal.option == option.Single and (index >= len(node.input) or not node.input[index]):
            raise ModelLoadError(
                f"{label}: required input {index} ({formal.name!r}) is missing; re-export the model"
            )
        if formal.option == option.Variadic and formal.is_homogeneous:  # Sum, Concat: every one
            empty = [i for i in range(index, len(node.input)) if not node.input[i]]
            if empty:
                raise ModelLoadError(
                    f"{label}: input {empty[0]} of the variadic {formal.name!r} is empty; each of "
                    "them must name a tensor, re-export the model"
                )


def _is_text(name: object) -> bool:
    if not isinstance(name, str):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(node: onnx.NodeProto, where: str) -> None:
    """Names and string attributes are UTF-8 (onnx's C++ schema lookups and the importers'
    comparisons take them as text; a flipped bit can make any of them undecodable)."""
    for name in (node.op_type, node.domain, node.name, *node.input, *node.output):
        if not _is_text(name):  # protobuf hands undecodable strings over as bytes
            raise ModelLoadError(
                f"{where}: a node's op type, domain, name or tensor name {name!r} is not UTF-8 "
                "text (ONNX names are UTF-8); the model is corrupt, re-export it"
            )
    for attr in node.attribute:
        for text in [attr.s, *attr.strings]:
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                raise ModelLoadError(
                    f"{where}: {_node_label(node)}: attribute {attr.name!r} holds {text[:16]!r}, which is "
                    "not UTF-8 text (ONNX strings are UTF-8); the model is corrupt, re-export it"
                ) from None


def _attr_type(value: int) -> str:
    known = AttributeProto.AttributeType.values()
    return AttributeProto.AttributeType.Name(value) if value in known else f"#{value}"


__all__ = ["DEFAULT_DOMAINS", "check_model", "check_node", "domain_opsets"]
