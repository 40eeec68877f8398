"""Mutations of tensors: declared shapes and element types, initializers' dims, types, data, names."""

from __future__ import annotations

import random
import struct

import onnx
from onnx import TensorProto

from fuzz.mutate.hostile import (
    ELEM_TYPES,
    HOSTILE_DIMS,
    HOSTILE_FLOATS,
    HOSTILE_INTS,
    hostile_list,
    tensor_names,
    value_infos,
)
from fuzz.mutate.registry import mutation


@mutation("value-info-dim")
def value_info_dim(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A declared dimension of an input, output or value_info set to 0, negative, huge or symbolic."""
    infos = [v for v in value_infos(model) if v.type.HasField("tensor_type")]
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
    infos = [v for v in value_infos(model) if v.type.HasField("tensor_type")]
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
    dims = hostile_list(rng, list(tensor.dims), HOSTILE_DIMS)
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
    tensor.name = rng.choice([*tensor_names(model), "", "no_such_tensor"])
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
