"""Coordinates, axis moves and flat gathers shared by node lowerings and the ONNX importers.

Any gather at computed coordinates (a sequence reversed within its length, an einsum
diagonal, nearest-neighbour resize) becomes one core ``Gather`` on the flattened data at
an int64 flat index; ``iota`` gives the constant coordinates those indices are built from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind


def iota(shape: tuple[int, ...], axis: int) -> np.ndarray:
    """int64 positions along ``axis``, shaped to broadcast over ``shape``."""
    return np.arange(shape[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(len(shape))])


def move_axis_last(b: Builder, x: Node, axis: int) -> tuple[Node, tuple[int, ...] | None]:
    """``x`` with ``axis`` moved to the end, and the permutation that undoes it (None if none)."""
    rank = x.type.rank
    if axis == rank - 1:
        return x, None
    perm = tuple(i for i in range(rank) if i != axis) + (axis,)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return b.Transpose(x, shuffle=perm), inverse


def exact_constant(b: Builder, array: np.ndarray, label: str) -> Node:
    """A Constant holding ``array`` exactly (dtype kept), named under the builder's prefix."""
    return b.module.create_constant(f"{b.prefix}{label}", np.ascontiguousarray(array))


def gather_at(b: Builder, data: Node, coords: Sequence[Node | np.ndarray], name: str | None = None) -> Node:
    """``data[coords[0], coords[1], ...]`` element by element: one Gather on the flattened data.

    Each coordinate is an int64 node or a constant index array; all broadcast to the result
    shape. The flat index is computed with int64 arithmetic, so any gather-like op
    (GatherElements, GatherND, nearest resize, one-hot) becomes the core Gather.
    """
    strides = [math.prod(data.type.shape[i + 1 :]) for i in range(data.type.rank)]
    flat: Node | np.ndarray = np.zeros((), np.int64)
    static = True
    for coord, stride in zip(coords, strides, strict=True):
        if isinstance(coord, np.ndarray) and static:
            flat = flat + coord.astype(np.int64) * stride  # type: ignore[operator]
            continue
        node = coord if isinstance(coord, Node) else exact_constant(b, coord.astype(np.int64), "coord")
        if node.type.elem is not ElemKind.int64:
            node = b.Convert(node, elem=ElemKind.int64.name)
        if stride != 1:
            node = b.mul(node, b.Splat(shape=(), value=stride, elem=node.type.elem.name))
        flat = b.add(flat if isinstance(flat, Node) else exact_constant(b, flat, "offset"), node)
        static = False
    index = flat if isinstance(flat, Node) else exact_constant(b, flat, "index")
    table = b.reshape(data, (data.type.size,))
    return b.Gather(table, index, axis=0, name=name)
