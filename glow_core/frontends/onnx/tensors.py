"""ONNX TensorProtos to numpy arrays, checked first: the one place a tensor's bytes are trusted.

``numpy_helper.to_array`` assumes a well-formed tensor: a wrong ``data_type`` is a
KeyError, a ``raw_data`` shorter than its dims a reshape ValueError, a negative dim is
accepted. ``check_tensor`` says instead, in a ModelLoadError naming the tensor, which field
disagrees with which, and refuses a tensor over the per-tensor budget (``glow_core.limits``)
before its data is read.

External data (``data_location = EXTERNAL``) is read by ``load_external_data`` only, from
a base directory the caller chose (the model file's folder, or ``base_dir=``), never from
the process's working directory, and only from files inside it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

from glow_core.errors import ModelLoadError
from glow_core.limits import current_limits

_PACKED_BITS = {
    TensorProto.INT4: 4,
    TensorProto.UINT4: 4,
    TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2,
    TensorProto.UINT2: 2,
    TensorProto.FLOAT6E2M3: 6,
    TensorProto.FLOAT6E3M2: 6,
}
"""Element kinds stored packed in ``raw_data`` (bits per element)."""

_PER_INT32 = {4: 2, 2: 4, 6: 1}
"""Elements per ``int32_data`` entry for the packed kinds (4-bit: one byte of two...)."""


def _type_name(data_type: int) -> str:
    return TensorProto.DataType.Name(data_type) if data_type in TensorProto.DataType.values() else "?"


def _bits(tensor: TensorProto, where: str) -> int:
    """Bits per element of ``tensor``'s data type, refusing unknown or undefined types."""
    data_type = tensor.data_type
    if data_type in _PACKED_BITS:
        return _PACKED_BITS[data_type]
    if data_type == TensorProto.UNDEFINED or data_type not in TensorProto.DataType.values():
        raise ModelLoadError(
            f"{where}: data_type {data_type} ({_type_name(data_type)}) is not an ONNX element type "
            "(TensorProto.DataType); the model is corrupt, re-export it"
        )
    if data_type == TensorProto.STRING:
        return 0
    return 8 * helper.tensor_dtype_to_np_dtype(data_type).itemsize


def _typed_length(tensor: TensorProto, count: int, bits: int) -> tuple[str, int]:
    """The typed field holding ``tensor``'s values and the length it must have."""
    field = helper.tensor_dtype_to_field(tensor.data_type)
    if tensor.data_type in _PACKED_BITS:
        return field, math.ceil(count / _PER_INT32[bits])
    if tensor.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        return field, 2 * count
    return field, count


_MAX_ELEMENTS = 2**62
"""Dims whose non-zero product exceeds this have no array, even with a zero among them."""


def check_tensor(tensor: TensorProto, where: str) -> None:
    """Refuse (ModelLoadError) a tensor whose fields disagree, or one over the budget.

    Checked: a known element type, non-negative dims, no segment, and data of exactly
    the size its dims say, in ``raw_data``, in the typed field, or in an external file
    (whose length is checked when read). ``where`` names the tensor in messages.
    """
    bits = _bits(tensor, where)
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise ModelLoadError(f"{where}: dims {dims} include a negative dimension; re-export the model")
    if tensor.HasField("segment"):
        raise ModelLoadError(f"{where}: segmented tensors (TensorProto.segment) are not supported")
    count = math.prod(dims)
    if math.prod(d for d in dims if d) > _MAX_ELEMENTS:  # numpy refuses such dims even for 0 elements
        raise ModelLoadError(f"{where}: dims {dims} are too large for any array; re-export the model")
    current_limits().check_tensor(where, dims, bits / 8 if bits else 1)
    if uses_external_data(tensor):
        return  # sizes checked by load_external_data, which reads the bytes
    if tensor.data_type == TensorProto.STRING:
        _expect_length(where, "string_data", len(tensor.string_data), count, dims)
    elif tensor.HasField("raw_data"):
        _expect_length(where, "raw_data bytes", len(tensor.raw_data), math.ceil(count * bits / 8), dims)
    else:
        field, expected = _typed_length(tensor, count, bits)
        _expect_length(where, field, len(getattr(tensor, field)), expected, dims)


def _expect_length(where: str, field: str, actual: int, expected: int, dims: list[int]) -> None:
    if actual != expected:
        what = "has no data" if actual == 0 else f"has {actual} {field}"
        raise ModelLoadError(
            f"{where} {what}, but its dims {dims} need {expected} {field}; "
            "the model is truncated or corrupt, re-export it"
        )


def tensor_array(tensor: TensorProto, where: str) -> np.ndarray:
    """The value of a checked tensor (``check_tensor``) as a numpy array.

    External data must have been read in by ``load_external_data`` first: reading it here
    would need a base directory, and the working directory is never one.
    """
    check_tensor(tensor, where)
    if uses_external_data(tensor):
        raise ModelLoadError(
            f"{where} keeps its data in an external file that was not read in; load the model "
            "with load_onnx(path) or pass base_dir= (the folder holding its data files)"
        )
    return numpy_helper.to_array(tensor)


def array_from_raw(tensor: TensorProto, raw: bytes) -> np.ndarray | None:
    """What ``tensor_array`` gives for ``tensor`` (checked, its ``raw_data`` left out) with
    ``raw`` as its ``raw_data``, made over ``raw`` itself: no TensorProto holds the bytes on
    the way. None where onnx unpacks or swaps the bytes (packed kinds, strings, a big-endian
    host): the caller then converts the whole tensor."""
    if (
        tensor.data_type in _PACKED_BITS
        or tensor.data_type == TensorProto.STRING
        or sys.byteorder != "little"
    ):
        return None
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return np.frombuffer(raw, dtype=dtype).reshape([int(d) for d in tensor.dims])


# ---- external data ---------------------------------------------------------------------------


def model_tensors(graph: onnx.GraphProto, where: str = "") -> Iterator[tuple[TensorProto, str]]:
    """Every tensor of ``graph`` and its subgraphs: initializers and attribute tensors, each
    with a description for messages."""
    prefix = f"{where}subgraph {graph.name!r}: " if where else ""
    for tensor in graph.initializer:
        yield tensor, f"{prefix}initializer {tensor.name!r}"
    for sparse in graph.sparse_initializer:
        yield sparse.values, f"{prefix}sparse initializer {sparse.values.name!r} (values)"
        yield sparse.indices, f"{prefix}sparse initializer {sparse.values.name!r} (indices)"
    for node in graph.node:
        label = f"{prefix}node {node.name or (node.output[0] if node.output else node.op_type)!r}"
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t, f"{label} attribute {attr.name!r}"
            for i, t in enumerate(attr.tensors):
                yield t, f"{label} attribute {attr.name!r}[{i}]"
            if attr.HasField("g"):
                yield from model_tensors(attr.g, f"{label} ")
            for sub in attr.graphs:
                yield from model_tensors(sub, f"{label} ")


def uses_external(model: onnx.ModelProto) -> bool:
    """Whether any tensor of ``model`` keeps its data in an external file."""
    return any(uses_external_data(t) for t, _ in model_tensors(model.graph))


def load_external_data(model: onnx.ModelProto, base_dir: str | os.PathLike) -> None:
    """Read every external tensor's bytes into ``model`` (in place), from files inside ``base_dir``.

    A location must be a relative path with no ``..`` that resolves (symbolic links
    followed) inside ``base_dir``; the declared size is checked against the budget before
    reading, and onnx's reader checks offset and length against the file. Any refusal or
    read failure is a ModelLoadError naming the tensor and the file.
    """
    root = os.path.realpath(base_dir)
    if not os.path.isdir(root):
        raise ModelLoadError(f"base_dir {os.fspath(base_dir)!r} (for external data) is not a directory")
    for tensor, where in model_tensors(model.graph):
        if not uses_external_data(tensor):
            continue
        check_tensor(tensor, where)
        location = _confined_location(tensor, where, root)
        try:
            load_external_data_for_tensor(tensor, root)
        except (OSError, ValueError, onnx.checker.ValidationError) as err:
            text = " ".join(str(err).split())
            raise ModelLoadError(
                f"{where}: cannot read its external data from {location!r} in {root!r}: "
                f"{type(err).__name__}: {text}"
            ) from None
        check_tensor(tensor, where)  # the bytes read must match the dims too


def _confined_location(tensor: TensorProto, where: str, root: str) -> str:
    """The tensor's external file, refused unless it lies inside ``root``."""
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    parts = location.replace("\\", "/").split("/")
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or ".." in parts:
        raise ModelLoadError(
            f"{where}: external data location {location!r} must be a relative path inside the "
            "model's folder (no '..', not absolute); re-export the model with its data beside it"
        )
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise ModelLoadError(
            f"{where}: external data location {location!r} resolves to {path!r}, outside {root!r} "
            "(a symbolic link leads out); copy the data file into the model's folder"
        )
    if not os.path.isfile(path):
        raise ModelLoadError(f"{where}: external data file {location!r} does not exist in {root!r}")
    return location


__all__ = [
    "array_from_raw",
    "check_tensor",
    "load_external_data",
    "model_tensors",
    "tensor_array",
    "uses_external",
]
