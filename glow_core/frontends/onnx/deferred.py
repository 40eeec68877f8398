"""Reading a model the loader owns (a file or bytes) with its graph's weights left where they
are until each one's array is made, so the import holds every weight once, not twice.

The ModelProto the rest of the loader sees is the model parsed without its graph's
initializers (``wire.split_initializers``), given back one stub per initializer: its name,
element type and dims, marked as external data so the checks that look at data sizes leave
it to ``DeferredWeights``, which parses the real tensor from its span when the array is
made. Each real tensor is parsed and checked (``check_tensor``) once while splitting, so a
malformed one is still refused before anything is built.

Anything this reading does not take on falls back to parsing the model whole
(``model.read_model``), unchanged: a ModelProto given by the caller (never modified, and
already in memory), framing the splitter refuses, external data, initializers sharing a
name, and models older than the loader's oldest opset (the version converter needs the
real tensors). Errors are then exactly the parser's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto
from onnx.external_data_helper import uses_external_data

from glow_core.errors import GlowError, ModelLoadError
from glow_core.frontends.onnx.model import ModelSource, one_line, read_model
from glow_core.frontends.onnx.tensors import array_from_raw, check_tensor, tensor_array, uses_external
from glow_core.frontends.onnx.validate import DEFAULT_DOMAINS, check_model
from glow_core.frontends.onnx.wire import (
    ByteSource,
    BytesSource,
    FileSource,
    Malformed,
    raw_data_span,
    split_initializers,
)

_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)
"""The TensorProto fields that hold values (a stub has none of them)."""


@dataclass(frozen=True)
class _Deferred:
    """Where an initializer lies: its TensorProto, its ``raw_data`` (None if it has none), and
    its stub (name, type and dims: ``array_from_raw`` needs no more)."""

    tensor: tuple[int, int]
    raw_data: tuple[int, int] | None
    stub: TensorProto


class DeferredWeights:
    """The graph's initializers, each read from the model's bytes when its array is made."""

    def __init__(self, source: ByteSource, deferred: dict[str, _Deferred]):
        self._source = source
        self._deferred = deferred

    def __contains__(self, name: str) -> bool:
        return name in self._deferred

    def array(self, name: str, where: str) -> np.ndarray:
        """Initializer ``name``'s value, read now. ``raw_data`` is read straight into the
        array's buffer where onnx would take it as it is; any other tensor is parsed and
        converted whole (``tensor_array``), its bytes dropped after."""
        entry = self._deferred[name]
        try:
            if entry.raw_data is not None:
                array = array_from_raw(entry.stub, self._source.read(*entry.raw_data))
                if array is not None:
                    return array
            tensor = TensorProto.FromString(self._source.read(*entry.tensor))
        except (Malformed, OSError, DecodeError) as err:  # read when split, so only if it changed since
            raise ModelLoadError(
                f"{where}: cannot read it again ({type(err).__name__}: {one_line(err)}); "
                "was the model file changed while it was loading? Load it again"
            ) from None
        return tensor_array(tensor, where)


@contextmanager
def model_for_import(
    model: ModelSource, base_dir: str | os.PathLike | None, min_opset: int
) -> Iterator[tuple[onnx.ModelProto, str, DeferredWeights | None]]:
    """The checked model, its description, and its deferred weights (None where the model
    was parsed whole); the weights can be read until the context ends."""
    if isinstance(model, bytes | bytearray):
        yield _read(BytesSource(model), "ONNX model bytes", model, base_dir, min_opset)
        return
    if isinstance(model, onnx.ModelProto):
        yield (*read_model(model, base_dir), None)
        return
    path = os.fspath(model)
    try:
        fd = os.open(path, os.O_RDONLY) if os.path.isfile(path) else None
    except OSError:
        fd = None
    if fd is None:
        yield (*read_model(model, base_dir), None)  # says what is wrong with the path
        return
    try:
        yield _read(FileSource(fd), f"ONNX model file {path!r}", model, base_dir, min_opset)
    finally:
        os.close(fd)


def _read(
    source: ByteSource,
    description: str,
    model: ModelSource,
    base_dir: str | os.PathLike | None,
    min_opset: int,
) -> tuple[onnx.ModelProto, str, DeferredWeights | None]:
    """``model`` split (see the module docstring), or parsed whole where it cannot be."""
    try:
        proto, deferred, refusal = _split(source, description, min_opset)
    except GlowError:
        raise
    except Exception:
        return (*read_model(model, base_dir), None)
    if proto is None:
        return (*read_model(model, base_dir), None)
    check_model(proto, description)
    if refusal is not None:
        raise refusal
    return proto, description, DeferredWeights(source, deferred)


def _split(
    source: ByteSource, description: str, min_opset: int
) -> tuple[onnx.ModelProto | None, dict[str, _Deferred], GlowError | None]:
    """The model with stubs for its initializers, their spans, and the first refusal of a
    real initializer (raised after the model's own checks, as ``check_model`` orders them);
    no model where it must be parsed whole."""
    split = split_initializers(source)
    proto = onnx.ModelProto.FromString(split.model)
    old = [op.version for op in proto.opset_import if op.domain in DEFAULT_DOMAINS and op.version < min_opset]
    if old or uses_external(proto):
        return None, {}, None
    deferred: dict[str, _Deferred] = {}
    refusal = None
    for offset, size in split.initializers:
        tensor = TensorProto.FromString(source.read(offset, size))
        if uses_external_data(tensor) or tensor.name in deferred:
            return None, {}, None
        if refusal is None:
            try:
                check_tensor(tensor, f"{description}: initializer {tensor.name!r}")
            except GlowError as err:
                refusal = err
        raw = raw_data_span(source, offset, size) if tensor.HasField("raw_data") else None
        stub = _add_stub(proto.graph, tensor)
        deferred[stub.name] = _Deferred((offset, size), raw, stub)
        del tensor  # one real tensor alive at a time
    return proto, deferred, refusal


def _add_stub(graph: onnx.GraphProto, tensor: TensorProto) -> TensorProto:
    """An initializer with ``tensor``'s name, type and dims but none of its values.

    The values are cleared from ``tensor`` (transient, in its own arena) before the copy:
    copied first, they would stay in the model's arena after being cleared there."""
    for field in _DATA_FIELDS:
        tensor.ClearField(field)
    stub = graph.initializer.add()
    stub.CopyFrom(tensor)
    stub.data_location = TensorProto.EXTERNAL
    return stub


__all__ = ["DeferredWeights", "model_for_import"]
