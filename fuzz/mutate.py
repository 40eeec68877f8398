"""Protobuf-level mutations of an ONNX model: the damage a broken exporter or a corrupt file does.

Each mutation is a function ``(model, rng) -> str | None`` registered under a kebab-case name
in ``MUTATIONS``: it edits the ModelProto in place and returns a one-line description of what
it did, or None when the model offers it nothing to damage (no attributes, no initializer...).
A mutation draws every choice from its own ``random.Random``, so a recipe that lists
(name, seed) pairs replays exactly and can be shrunk one step at a time (``minimize``).

Values are chosen to be hostile, not random: zero, negative, huge and NaN numbers, empty and
overlong lists, undefined element types, names that do not exist or exist twice.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable

import onnx
from onnx import AttributeProto, TensorProto

Mutation = Callable[[onnx.ModelProto, random.Random], str | None]
MUTATIONS: dict[str, Mutation] = {}

HOSTILE_INTS = (0, -1, -2, 1, 2, 3, 7, 2**31 - 1, -(2**31), 2**40, 2**62, 10**9)
HOSTILE_DIMS = (0, -1, -7, 1, 2, 3, 64, 2**20, 2**31, 2**40, 2**62)
HOSTILE_FLOATS = (math.nan, math.inf, -math.inf, 0.0, -1.0, 1e-30, 1e30, -3.5, 0.5)
# UNDEFINED (0), every real TensorProto type, and numbers no version of ONNX defines.
ELEM_TYPES = (0, *sorted(TensorProto.DataType.values()), 42, 99, -3)
DEFINED_TYPES = tuple(sorted(t for t in TensorProto.DataType.values() if t))


def mutation(name: str) -> Callable[[Mutation], Mutation]:
    """Register ``fn`` as mutation ``name`` (refusing a second registration)."""

    def register(fn: Mutation) -> Mutation:
        if name in MUTATIONS:
            raise TypeError(f"mutation {name!r} registered twice")
        MUTATIONS[name] = fn
        return fn

    return register


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def _tensor_names(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output if o]


def _hostile_list(rng: random.Random, current: list, scalars: tuple) -> list:
    choice = rng.randrange(5)
    if choice == 0:
        return []
    if choice == 1:
        return [*current, rng.choice(scalars)]
    if choice == 2 and current:
        return current[:-1]
    if choice == 3 and current:
        edited = list(current)
        edited[rng.randrange(len(edited))] = rng.choice(scalars)
        return edited
    return [rng.choice(scalars) for _ in range(rng.randint(1, 9))]


# ---- tensors: shapes, element types and data -----------------------------------------------


@mutation("value-info-dim")
def value_info_dim(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A declared dimension of an input, output or value_info set to 0, negative, huge or symbolic."""
    infos = [v for v in _value_infos(model) if v.type.HasField("tensor_type")]
    if not infos:
        return None
    info = rng.choice(infos)
    shape = info.type.tensor_type.shape
    choice = rng.randrange(4)
    if choice == 0 or not shape.dim:
        dim = shape.dim.add()
        dim.dim_value = rng.choice(HOSTILE_DIMS)
        return f"{info.name!r}: appended dim {dim.dim_value}"
    index = rng.randrange(len(shape.dim))
    if choice == 1:
        del shape.dim[index]
        return f"{info.name!r}: removed dim {index}"
    if choice == 2:
        shape.dim[index].dim_param = rng.choice(["N", "", "weird name", "N"])
        return f"{info.name!r}: dim {index} made symbolic"
    shape.dim[index].dim_value = rng.choice(HOSTILE_DIMS)
    return f"{info.name!r}: dim {index} = {shape.dim[index].dim_value}"


@mutation("value-info-elem-type")
def value_info_elem_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """The element type of an input, output or value_info changed (possibly to an undefined one)."""
    infos = [v for v in _value_infos(model) if v.type.HasField("tensor_type")]
    if not infos:
        return None
    info = rng.choice(infos)
    info.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
    return f"{info.name!r}: elem_type = {info.type.tensor_type.elem_type}"


@mutation("initializer-dims")
def initializer_dims(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An initializer's dims no longer match its data (a dim changed, added or removed)."""
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    dims = _hostile_list(rng, list(tensor.dims), HOSTILE_DIMS)
    del tensor.dims[:]
    tensor.dims.extend(dims)
    return f"initializer {tensor.name!r}: dims = {dims}"


@mutation("initializer-data-type")
def initializer_data_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An initializer's data_type changed, so its bytes are read as another (or no) type."""
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    tensor.data_type = rng.choice(ELEM_TYPES)
    return f"initializer {tensor.name!r}: data_type = {tensor.data_type}"


@mutation("initializer-raw-data")
def initializer_raw_data(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An initializer's raw_data truncated, extended or emptied, or typed data added beside it."""
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    raw = tensor.raw_data
    choice = rng.randrange(4)
    if choice == 0 and raw:
        tensor.raw_data = raw[: rng.randrange(len(raw))]
        return f"initializer {tensor.name!r}: raw_data truncated to {len(tensor.raw_data)} bytes"
    if choice == 1:
        tensor.raw_data = raw + bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
        return f"initializer {tensor.name!r}: raw_data extended to {len(tensor.raw_data)} bytes"
    if choice == 2:
        tensor.ClearField("raw_data")
        return f"initializer {tensor.name!r}: raw_data removed"
    count = rng.randint(0, 5)
    tensor.float_data.extend(rng.choice(HOSTILE_FLOATS) for _ in range(count))
    tensor.int64_data.extend(rng.choice(HOSTILE_INTS) for _ in range(count))
    return f"initializer {tensor.name!r}: {count} float_data and int64_data values added"


@mutation("initializer-values")
def initializer_values(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """Some float32 weights overwritten with NaN, infinities or extreme values (a valid model)."""
    floats = [t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT]
    tensors = [t for t in floats if len(t.raw_data) >= 4]  # a truncated one may hold less than one value
    if not tensors:
        return None
    tensor = rng.choice(tensors)
    raw = bytearray(tensor.raw_data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(raw) // 4) * 4
        raw[at : at + 4] = struct.pack("<f", rng.choice(HOSTILE_FLOATS))
    tensor.raw_data = bytes(raw)
    return f"initializer {tensor.name!r}: values overwritten with non-finite or extreme floats"


@mutation("initializer-name")
def initializer_name(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An initializer renamed to an unused name, or to the name of another tensor (a duplicate)."""
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    old = tensor.name
    tensor.name = rng.choice([*_tensor_names(model), "", "no_such_tensor"])
    return f"initializer {old!r} renamed {tensor.name!r}"


@mutation("external-data")
def external_data(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An initializer said to live in an external file that does not exist."""
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", rng.choice(["fuzz-missing-weights.bin", ""])
    return f"initializer {tensor.name!r}: external data at {entry.value!r}"


# ---- attributes --------------------------------------------------------------------------


def _attributes(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, AttributeProto]]:
    return [(n, a) for n in model.graph.node for a in n.attribute if a.type != AttributeProto.GRAPH]


@mutation("attribute-value")
def attribute_value(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An attribute's value made hostile for its type: huge, negative, NaN, empty, overlong."""
    found = _attributes(model)
    if not found:
        return None
    node, attr = rng.choice(found)
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(HOSTILE_INTS)
    elif attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice(HOSTILE_FLOATS)
    elif attr.type == AttributeProto.INTS:
        values = _hostile_list(rng, list(attr.ints), HOSTILE_INTS)
        del attr.ints[:]
        attr.ints.extend(values)
    elif attr.type == AttributeProto.FLOATS:
        values = _hostile_list(rng, list(attr.floats), HOSTILE_FLOATS)
        del attr.floats[:]
        attr.floats.extend(values)
    elif attr.type == AttributeProto.STRING:
        attr.s = rng.choice([b"", b"bogus", b"\xff\xfe", attr.s.upper()])
    elif attr.type == AttributeProto.TENSOR:
        attr.t.CopyFrom(onnx.helper.make_tensor("t", rng.choice(DEFINED_TYPES[:16]), [0], []))
    else:
        return None
    return f"node {node.name or node.op_type!r}: attribute {attr.name!r} = {_printable(attr)}"


@mutation("attribute-type")
def attribute_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An attribute re-declared as another type, with or without a value in that type's field."""
    found = _attributes(model)
    if not found:
        return None
    node, attr = rng.choice(found)
    new_type = rng.choice(
        [
            AttributeProto.INT,
            AttributeProto.FLOAT,
            AttributeProto.INTS,
            AttributeProto.FLOATS,
            AttributeProto.STRING,
            AttributeProto.STRINGS,
            AttributeProto.TENSOR,
            AttributeProto.UNDEFINED,
        ]
    )
    attr.type = new_type
    if rng.random() < 0.5:
        if new_type == AttributeProto.INT:
            attr.i = rng.choice(HOSTILE_INTS)
        elif new_type == AttributeProto.FLOAT:
            attr.f = rng.choice(HOSTILE_FLOATS)
        elif new_type == AttributeProto.INTS:
            attr.ints.extend([rng.choice(HOSTILE_INTS)])
        elif new_type == AttributeProto.STRING:
            attr.s = b"bogus"
    name = AttributeProto.AttributeType.Name(new_type)
    return f"node {node.name or node.op_type!r}: attribute {attr.name!r} declared {name}"


@mutation("attribute-drop-or-add")
def attribute_drop_or_add(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A (maybe required) attribute removed, duplicated, or an unknown one added."""
    if not model.graph.node:
        return None
    node = rng.choice(model.graph.node)
    choice = rng.randrange(3)
    if choice == 0 and node.attribute:
        index = rng.randrange(len(node.attribute))
        name = node.attribute[index].name
        del node.attribute[index]
        return f"node {node.name or node.op_type!r}: attribute {name!r} removed"
    if choice == 1 and node.attribute:
        copy = node.attribute.add()
        copy.CopyFrom(rng.choice(node.attribute[:-1]))
        return f"node {node.name or node.op_type!r}: attribute {copy.name!r} given twice"
    node.attribute.append(onnx.helper.make_attribute("fuzz_unknown", rng.choice(HOSTILE_INTS)))
    return f"node {node.name or node.op_type!r}: unknown attribute added"


def _printable(attr: AttributeProto) -> str:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, TensorProto):
        return f"tensor of type {value.data_type}, dims {list(value.dims)}"
    text = repr(list(value) if not isinstance(value, int | float | bytes) else value)
    return text if len(text) < 60 else text[:57] + "..."


# ---- nodes: names, op types, order -------------------------------------------------------


@mutation("node-input")
def node_input(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node input renamed to an unknown tensor, emptied, duplicated, dropped, or two swapped."""
    nodes = [n for n in model.graph.node if n.input]
    if not nodes:
        return None
    node = rng.choice(nodes)
    index = rng.randrange(len(node.input))
    label = f"node {node.name or node.op_type!r}"
    choice = rng.randrange(5)
    if choice == 0:
        node.input[index] = "no_such_tensor"
        return f"{label}: input {index} names a tensor that does not exist"
    if choice == 1:
        node.input[index] = ""
        return f"{label}: input {index} left out"
    if choice == 2:
        node.input.append(node.input[index])
        return f"{label}: input {index} repeated as an extra input"
    if choice == 3:
        del node.input[-1]
        return f"{label}: last input dropped"
    other = rng.randrange(len(node.input))
    node.input[index], node.input[other] = node.input[other], node.input[index]
    return f"{label}: inputs {index} and {other} swapped"


@mutation("node-output")
def node_output(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node output renamed to an existing tensor (two producers), dropped, or one added."""
    nodes = [n for n in model.graph.node if n.output]
    if not nodes:
        return None
    node = rng.choice(nodes)
    label = f"node {node.name or node.op_type!r}"
    choice = rng.randrange(3)
    if choice == 0:
        index = rng.randrange(len(node.output))
        node.output[index] = rng.choice(_tensor_names(model))
        return f"{label}: output {index} renamed {node.output[index]!r}"
    if choice == 1:
        del node.output[-1]
        return f"{label}: last output dropped"
    node.output.append(f"{node.output[0]}_extra")
    return f"{label}: an extra output added"


@mutation("node-op-type")
def node_op_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node's op type replaced by another op glow knows, an unknown op, or a foreign domain."""
    from glow_core.frontends.onnx import SUPPORTED_OPS

    if not model.graph.node:
        return None
    node = rng.choice(model.graph.node)
    old = node.op_type
    choice = rng.randrange(4)
    if choice == 0:
        node.domain = rng.choice(["com.fuzz", "ai.onnx.ml", "com.microsoft"])
        return f"node {node.name or old!r}: domain {node.domain!r}"
    node.op_type = "FuzzNoSuchOp" if choice == 1 else rng.choice(sorted(SUPPORTED_OPS))
    return f"node {node.name or old!r}: op {old} replaced by {node.op_type}"


@mutation("node-order")
def node_order(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """Nodes shuffled out of topological order, or a cycle made (a node reads a later output)."""
    nodes = list(model.graph.node)
    if len(nodes) < 2:
        return None
    if rng.random() < 0.5:
        rng.shuffle(nodes)
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        return "nodes shuffled"
    first = rng.randrange(len(nodes) - 1)
    later = nodes[rng.randrange(first + 1, len(nodes))]
    if not nodes[first].input or not later.output:
        return None
    nodes[first].input[0] = later.output[0]
    return f"cycle: node {first} reads {later.output[0]!r}, computed after it"


# ---- the graph's interface and the model's versions ---------------------------------------


@mutation("graph-output")
def graph_output(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """Graph outputs duplicated, removed, or naming an unknown tensor or a graph input."""
    outputs = model.graph.output
    choice = rng.randrange(4)
    if choice == 0 and outputs:
        outputs.add().CopyFrom(rng.choice(outputs))
        return f"graph output {outputs[-1].name!r} listed twice"
    if choice == 1:
        del outputs[:]
        return "every graph output removed"
    if not outputs:
        return None
    target = rng.choice(outputs)
    inputs = [v.name for v in model.graph.input]
    target.name = rng.choice(inputs) if choice == 2 and inputs else "no_such_tensor"
    return f"a graph output renamed {target.name!r}"


@mutation("graph-input")
def graph_input(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A graph input removed or duplicated, or an initializer declared as an input too."""
    inputs = model.graph.input
    choice = rng.randrange(3)
    if choice == 0 and inputs:
        index = rng.randrange(len(inputs))
        name = inputs[index].name
        del inputs[index]
        return f"graph input {name!r} removed"
    if choice == 1 and inputs:
        inputs.add().CopyFrom(rng.choice(inputs))
        return f"graph input {inputs[-1].name!r} listed twice"
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    inputs.append(
        onnx.helper.make_tensor_value_info(tensor.name, TensorProto.FLOAT, [rng.choice(HOSTILE_DIMS)])
    )
    return f"initializer {tensor.name!r} also declared as an input of another shape"


@mutation("opset")
def opset(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """The default-domain opset changed to an old, future, absurd or negative version, or removed."""
    imports = model.opset_import
    choice = rng.randrange(3)
    if choice == 0 and imports:
        del imports[:]
        return "every opset import removed"
    if choice == 1:
        imports.add().CopyFrom(onnx.helper.make_opsetid("", rng.choice([1, 13, 17, 21])))
        return "the default domain imported twice"
    for entry in imports:
        if entry.domain in ("", "ai.onnx"):
            entry.version = rng.choice([0, 1, 6, 7, 9, 12, 13, 16, 18, 21, 23, 99, 10**6, -1])
            return f"default opset = {entry.version}"
    return None


@mutation("ir-version")
def ir_version(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """The IR version changed to an old, future or absurd value."""
    model.ir_version = rng.choice([0, 1, 3, 4, 7, 11, 13, 99, -1])
    return f"ir_version = {model.ir_version}"


def apply(model: onnx.ModelProto, steps: list[tuple[str, int]]) -> list[str]:
    """Apply ``steps`` (mutation name, seed) in order; the descriptions of those that applied."""
    done = []
    for name, seed in steps:
        description = MUTATIONS[name](model, random.Random(seed))
        if description is not None:
            done.append(f"{name}: {description}")
    return done


def damage_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """The serialized model truncated or with a few bytes flipped (a corrupt file)."""
    if rng.random() < 0.5 and data:
        cut = rng.randrange(len(data))
        return data[:cut], f"bytes: truncated to {cut} of {len(data)}"
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if damaged:
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    return bytes(damaged), "bytes: bits flipped"
