"""A serialized ONNX model split by the protobuf wire format: the model without its graph's
initializers, and where each initializer's bytes lie.

Why: with protobuf's upb backend (the default) a parsed message keeps every byte it was
parsed from in one arena, freed only with the whole message; clearing an initializer's
``raw_data`` frees nothing. A ModelProto parsed whole therefore holds every weight until the
import ends, beside the arrays made from it (and ``onnx.load`` first holds the file's bytes
beside the parsed message): twice the weights either way. Parsing the model without its
initializers, and each initializer on its own when its array is made, holds each weight
once. Only the framing (tags and lengths) is read here; nothing is decoded but varints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

_MODEL_GRAPH = 7
"""``ModelProto.graph``'s field number."""
_GRAPH_INITIALIZER = 5
"""``GraphProto.initializer``'s field number."""
_TENSOR_RAW_DATA = 9
"""``TensorProto.raw_data``'s field number."""
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
"""The wire types a model uses (groups, 3 and 4, are not protobuf 3)."""


class Malformed(Exception):
    """The framing is not what a well-formed model has; the caller parses it whole instead,
    so the error a user sees is the parser's, as before."""


class ByteSource(Protocol):
    """Random access to a serialized model: its length and any span of it."""

    size: int

    def read(self, offset: int, size: int) -> bytes: ...


class BytesSource:
    """A model given as bytes: spans are copied out of the caller's buffer."""

    def __init__(self, data: bytes | bytearray | memoryview):
        self._view = memoryview(data).cast("B")
        self.size = len(self._view)

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self._view[offset : offset + size])


class FileSource:
    """A model file read with ``os.pread``: never mapped, so the spans read leave nothing
    resident in this process once their copies are dropped (the page cache holds the file)."""

    def __init__(self, fd: int):
        self._fd = fd
        self.size = os.fstat(fd).st_size

    def read(self, offset: int, size: int) -> bytes:
        chunks, done = [], 0
        while done < size:  # a single read returns at most ~2 GiB on Linux
            chunk = os.pread(self._fd, size - done, offset + done)
            if not chunk:
                raise Malformed(f"the file ends at byte {offset + done}, inside a field")
            chunks.append(chunk)
            done += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@dataclass(frozen=True)
class SplitModel:
    """``model``: the serialized model without its graph's initializers; ``initializers``:
    (offset, size) of each serialized TensorProto in the source, in the model's order."""

    model: bytes
    initializers: list[tuple[int, int]]


def _varint(source: ByteSource, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    data = source.read(pos, min(10, end - pos))
    value = 0
    for i, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise Malformed(f"unterminated varint at byte {pos}")


def _fields(source: ByteSource, start: int, end: int):
    """(field number, wire type, field start, value start, field end) of each field in
    ``source[start:end]``, a message's body."""
    pos = start
    while pos < end:
        key, value_start = _varint(source, pos, end)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, field_end = _varint(source, value_start, end)
        elif wire == _FIXED64:
            field_end = value_start + 8
        elif wire == _FIXED32:
            field_end = value_start + 4
        elif wire == _LENGTH:
            length, value_start = _varint(source, value_start, end)
            field_end = value_start + length
        else:
            raise Malformed(f"wire type {wire} at byte {pos}")
        if number == 0 or field_end > end:
            raise Malformed(f"field {number} at byte {pos} runs past its message")
        yield number, wire, pos, value_start, field_end
        pos = field_end


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def split_initializers(source: ByteSource) -> SplitModel:
    """The model in ``source`` without its graph's initializers, and their spans.

    Raises Malformed for framing a well-formed model does not have (a truncated field, a
    group, the graph given in more than one piece, which protobuf would merge).
    """
    kept: list[bytes] = []
    graph: tuple[int, int] | None = None
    for number, wire, start, value_start, end in _fields(source, 0, source.size):
        if number == _MODEL_GRAPH and wire == _LENGTH:
            if graph is not None:
                raise Malformed("the graph field appears more than once")
            graph = (value_start, end)
        else:
            kept.append(source.read(start, end - start))
    if graph is None:
        raise Malformed("the model has no graph")
    graph_kept: list[bytes] = []
    initializers: list[tuple[int, int]] = []
    for number, wire, start, value_start, end in _fields(source, *graph):
        if number == _GRAPH_INITIALIZER and wire == _LENGTH:
            initializers.append((value_start, end - value_start))
        else:
            graph_kept.append(source.read(start, end - start))
    graph_body = b"".join(graph_kept)
    kept.append(_encode_varint(_MODEL_GRAPH << 3 | _LENGTH) + _encode_varint(len(graph_body)) + graph_body)
    return SplitModel(b"".join(kept), initializers)


def raw_data_span(source: ByteSource, offset: int, size: int) -> tuple[int, int] | None:
    """(offset, size) of the ``raw_data`` of the TensorProto at ``source[offset:offset+size]``
    (the last one given, as protobuf reads a repeated singular field), or None."""
    found = None
    for number, wire, _, value_start, end in _fields(source, offset, offset + size):
        if number == _TENSOR_RAW_DATA and wire == _LENGTH:
            found = (value_start, end - value_start)
    return found


__all__ = [
    "ByteSource",
    "BytesSource",
    "FileSource",
    "Malformed",
    "SplitModel",
    "raw_data_span",
    "split_initializers",
]
