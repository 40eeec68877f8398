"""Importers for ONNX sequences and optionals, resolved while loading.

glow graphs hold tensors only, so a sequence is load-time structure: a ``SequenceValue``, a
list of ordinary graph values whose length the loader knows. A sequence input's length
comes with the call a session specializes for (``glow_core.load``), and every sequence op
changes a length by an amount known at load time, so SequenceInsert, SequenceErase and
SequenceAt are list edits at load-time positions, SplitToSequence is one Slice per piece,
ConcatFromSequence one Concat, and SequenceMap imports its body once per element. An
optional is its element (a tensor or a sequence) or ``EMPTY_OPTIONAL``, so whether it has
one is known at load time too.
"""

from __future__ import annotations

import numpy as np
import onnx

from glow_core.frontends.onnx.registry import (
    EMPTY_OPTIONAL,
    AnyValue,
    EmptyOptional,
    NodeContext,
    SequenceValue,
    Value,
    importer,
    kind_of,
)
from glow_core.graph.node import Node

_NO_EMPTY_TENSORS = "glow has no empty tensors"


def _shape(value: Value) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, np.ndarray) else value.type.shape


def _dtype(value: Value) -> np.dtype:
    return value.dtype if isinstance(value, np.ndarray) else value.type.dtype


def _check_same_dtype(ctx: NodeContext, items: list[Value]) -> None:
    """ONNX sequences are homogeneous: refuse mixed element types here, where the node is known."""
    kinds = sorted({str(_dtype(v)) for v in items})
    if len(kinds) > 1:
        raise ctx.refuse(f"a sequence holds one element type, but these tensors have {kinds}")


def _position(ctx: NodeContext, index: int, length: int, *, insert: bool) -> int:
    """The load-time position input ``index`` as an index in 0..length (negatives count back).

    Absent, it means the end: after the last element when inserting, the last one otherwise.
    """
    last = length if insert else length - 1
    if not insert and length == 0:
        raise ctx.refuse("the sequence is empty, so it has no element at any position")
    if not ctx.has(index):
        return last
    position = ctx.int_scalar(index, "position")
    if not -length <= position <= last:
        raise ctx.refuse(f"position {position} is outside [{-length}, {last}] for a sequence of {length}")
    return position + length if position < 0 else position


# ---- building and editing sequences ------------------------------------------------------


@importer("SequenceEmpty")
def _sequence_empty(ctx: NodeContext) -> list[AnyValue]:
    return [SequenceValue()]


@importer("SequenceConstruct")
def _sequence_construct(ctx: NodeContext) -> list[AnyValue]:
    items = [ctx.tensor(i) for i in range(len(ctx.proto.input))]
    _check_same_dtype(ctx, items)
    return [SequenceValue(items)]


@importer("SequenceInsert")
def _sequence_insert(ctx: NodeContext) -> list[AnyValue]:
    sequence, item = ctx.sequence(0), ctx.tensor(1)
    _check_same_dtype(ctx, [*sequence, item])
    at = _position(ctx, 2, len(sequence), insert=True)
    return [SequenceValue([*sequence[:at], item, *sequence[at:]])]


@importer("SequenceErase")
def _sequence_erase(ctx: NodeContext) -> list[AnyValue]:
    sequence = ctx.sequence(0)
    at = _position(ctx, 1, len(sequence), insert=False)
    return [SequenceValue([*sequence[:at], *sequence[at + 1 :]])]


@importer("SequenceAt")
def _sequence_at(ctx: NodeContext) -> Value:
    sequence = ctx.sequence(0)
    return sequence[_position(ctx, 1, len(sequence), insert=False)]


@importer("SequenceLength")
def _sequence_length(ctx: NodeContext) -> np.ndarray:
    return np.array(len(ctx.sequence(0)), np.int64)


# ---- between tensors and sequences -------------------------------------------------------


def _piece_sizes(ctx: NodeContext, dim: int) -> tuple[list[int], bool]:
    """The lengths of SplitToSequence's pieces and whether they keep the split axis.

    ``split`` is one length (the last piece takes the remainder) or every piece's length;
    without it, every piece has length 1 and ``keepdims`` says whether the axis stays.
    """
    if not ctx.has(1):
        return [1] * dim, ctx.flag_attr("keepdims", 1)
    split = ctx.static(1, "split")
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise ctx.refuse(f"split {size} must be positive ({_NO_EMPTY_TENSORS})")
        sizes = [size] * (dim // size) + ([dim % size] if dim % size else [])
        return sizes, True
    sizes = [int(s) for s in split.reshape(-1)]
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ctx.refuse(f"split sizes {sizes} do not divide a dimension of size {dim}")
    if 0 in sizes:
        raise ctx.refuse(f"split sizes {sizes} ask for an empty piece; {_NO_EMPTY_TENSORS}")
    return sizes, True


def _piece(ctx: NodeContext, x: Value, axis: int, start: int, size: int, keep: bool, index: int) -> Value:
    """``x[..., start:start + size, ...]`` along ``axis``, the axis dropped unless ``keep``."""
    shape = _shape(x)
    kept = shape[:axis] + (size,) + shape[axis + 1 :]
    final = kept if keep else shape[:axis] + shape[axis + 1 :]
    if isinstance(x, np.ndarray):
        return np.take(x, range(start, start + size), axis=axis).reshape(final)
    starts = tuple(start if i == axis else 0 for i in range(len(shape)))
    ends = tuple(start + size if i == axis else d for i, d in enumerate(shape))
    piece = ctx.b.Slice(x, starts=starts, ends=ends, name=f"{ctx.name}:{index}")
    return piece if keep else ctx.b.Reshape(piece, shape=final)


@importer("SplitToSequence")
def _split_to_sequence(ctx: NodeContext) -> list[AnyValue]:
    x = ctx.tensor(0)
    shape = _shape(x)
    if not shape:
        raise ctx.refuse("a scalar cannot be split")
    axis = ctx.axis_attr("axis", 0, len(shape))
    sizes, keep = _piece_sizes(ctx, shape[axis])
    starts = np.cumsum([0, *sizes[:-1]])
    pieces = [
        _piece(ctx, x, axis, int(start), size, keep, i)
        for i, (start, size) in enumerate(zip(starts, sizes, strict=True))
    ]
    return [SequenceValue(pieces)]


def _with_new_axis(ctx: NodeContext, value: Value, axis: int) -> Value:
    shape = _shape(value)
    shape = shape[:axis] + (1,) + shape[axis:]
    return value.reshape(shape) if isinstance(value, np.ndarray) else ctx.b.Reshape(value, shape=shape)


@importer("ConcatFromSequence")
def _concat_from_sequence(ctx: NodeContext) -> Value:
    """One Concat of the elements (each given a new axis first when ``new_axis`` is set)."""
    sequence = ctx.sequence(0)
    if not sequence:
        raise ctx.refuse(f"the sequence is empty, so the result would be empty; {_NO_EMPTY_TENSORS}")
    _check_same_dtype(ctx, list(sequence))
    new_axis = bool(ctx.attr("new_axis", 0))
    axis = ctx.axis(int(ctx.required_attr("axis")), len(_shape(sequence[0])) + new_axis, "attribute 'axis'")
    items = [_with_new_axis(ctx, v, axis) if new_axis else v for v in sequence]
    if all(isinstance(v, np.ndarray) for v in items):
        return np.concatenate(items, axis=axis)  # type: ignore[arg-type]
    nodes = [ctx.to_node(v, f"item{i}") for i, v in enumerate(items)]
    return nodes[0] if len(nodes) == 1 else ctx.b.Concat(*nodes, axis=axis, name=ctx.name)


# ---- SequenceMap -------------------------------------------------------------------------


def _map_arguments(ctx: NodeContext, length: int) -> list[AnyValue]:
    """The additional inputs: sequences as long as the first, or tensors shared by every step."""
    extras = [ctx.value(i) for i in range(1, len(ctx.proto.input))]
    for offset, extra in enumerate(extras, start=1):
        if isinstance(extra, EmptyOptional):
            raise ctx.refuse(f"input {offset} is {kind_of(extra)}; SequenceMap takes tensors or sequences")
        if isinstance(extra, SequenceValue) and len(extra) != length:
            raise ctx.refuse(f"input {offset} is {kind_of(extra)}, but input 0 has {length} elements")
    return extras


def _body(ctx: NodeContext) -> onnx.GraphProto:
    if "body" not in ctx.graphs:
        raise ctx.refuse("attribute 'body' is missing")
    return ctx.graphs["body"]


@importer("SequenceMap")
def _sequence_map(ctx: NodeContext) -> list[AnyValue]:
    """The body imported once per element; output j collects every step's j-th result."""
    body = _body(ctx)
    sequence = ctx.sequence(0)
    extras = _map_arguments(ctx, len(sequence))
    outputs = [SequenceValue() for _ in body.output]
    for i, item in enumerate(sequence):
        arguments = [item, *(x[i] if isinstance(x, SequenceValue) else x for x in extras)]
        for j, result in enumerate(ctx.scope.import_graph(body, arguments)):
            if not isinstance(result, Node | np.ndarray):
                raise ctx.refuse(f"body output {j} is {kind_of(result)}; glow maps to sequences of tensors")
            outputs[j].append(result)
    return outputs  # type: ignore[return-value]


# ---- optionals ---------------------------------------------------------------------------


@importer("Optional")
def _optional(ctx: NodeContext) -> list[AnyValue]:
    """A present optional is its element itself; without an input, the empty optional."""
    return [ctx.value(0) if ctx.has(0) else EMPTY_OPTIONAL]


@importer("OptionalHasElement")
def _optional_has_element(ctx: NodeContext) -> np.ndarray:
    """Known at load time: an optional is empty only when it is EMPTY_OPTIONAL or not given."""
    return np.array(ctx.has(0) and not isinstance(ctx.value(0), EmptyOptional))


@importer("OptionalGetElement")
def _optional_get_element(ctx: NodeContext) -> list[AnyValue]:
    """The element of a present optional (a plain tensor or sequence is its own element)."""
    if not ctx.has(0) or isinstance(ctx.value(0), EmptyOptional):
        raise ctx.refuse("the optional is empty, so it has no element (ONNX makes this an error too)")
    return [ctx.value(0)]
