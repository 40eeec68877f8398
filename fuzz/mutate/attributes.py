"""Mutations of node attributes: hostile values, re-declared types, dropped, doubled or unknown ones."""

from __future__ import annotations

import random

import onnx
from onnx import AttributeProto, TensorProto

from fuzz.mutate.hostile import DEFINED_TYPES, HOSTILE_FLOATS, HOSTILE_INTS, hostile_list
from fuzz.mutate.registry import mutation


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
        values = hostile_list(rng, list(attr.ints), HOSTILE_INTS)
        del attr.ints[:]
        attr.ints.extend(values)
    elif attr.type == AttributeProto.FLOATS:
        values = hostile_list(rng, list(attr.floats), HOSTILE_FLOATS)
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
