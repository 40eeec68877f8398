"""Graph-building idioms the importers share: broadcasting, comparisons, flat gathers.

glow's primitives take operands of one shape (and, but for Select's condition, one
element kind); ONNX broadcasts numpy-style. These helpers make the broadcast explicit and
spell the few compound idioms (x != y, |x|, floor of a quotient, a gather at computed
coordinates) once, so importers read like the ONNX definitions they implement.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import ShapeError
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.indexing import gather_at as gather_at  # shared with node lowerings
from glow_core.graph.nodes.indexing import move_axis_last as move_axis_last  # shared with node lowerings
from glow_core.graph.nodes.linear_quant import convert as convert  # shared with node lowerings

# ONNX predicate -> (glow predicate, operands swapped, result negated)
_PREDICATES = {
    "eq": ("eq", False, False),
    "ne": ("eq", False, True),
    "lt": ("lt", False, False),
    "le": ("le", False, False),
    "gt": ("lt", True, False),
    "ge": ("le", True, False),
}


def broadcast(b: Builder, *values: Node) -> list[Node]:
    """``values`` broadcast (numpy rules) to their common shape."""
    try:
        shape = np.broadcast_shapes(*(v.type.shape for v in values))
    except ValueError:
        shapes = ", ".join(str(v.type) for v in values)
        raise ShapeError(f"shapes {shapes} do not broadcast") from None
    return [b.broadcast_to(v, shape) for v in values]


def scalar(b: Builder, value: float | int | bool, like: Node) -> Node:
    """A one-element constant of ``like``'s element kind (broadcast by the caller's helper)."""
    return b.Splat(shape=(), value=value, elem=like.type.elem.name)


def compare(b: Builder, lhs: Node, rhs: Node, predicate: str, name: str | None = None) -> Node:
    """Broadcasting ``lhs <predicate> rhs`` (eq, ne, lt, le, gt, ge) as bool."""
    kind, swap, negate = _PREDICATES[predicate]
    lhs, rhs = broadcast(b, lhs, rhs)
    if swap:
        lhs, rhs = rhs, lhs
    result = b.Compare(lhs, rhs, predicate=kind, name=None if negate else name)
    return logical_not(b, result, name) if negate else result


def logical_not(b: Builder, x: Node, name: str | None = None) -> Node:
    """Element-wise not of a bool tensor: x == false."""
    return b.Compare(x, b.splat(False, x), predicate="eq", name=name)


def select(b: Builder, cond: Node, lhs: Node, rhs: Node, name: str | None = None) -> Node:
    """Broadcasting ``cond ? lhs : rhs``."""
    cond, lhs, rhs = broadcast(b, cond, lhs, rhs)
    return b.Select(cond, lhs, rhs, name=name)


def negate(b: Builder, x: Node, name: str | None = None) -> Node:
    """-x as 0 - x: exact for floats, wrapping for integers as ONNX Neg does."""
    return b.Sub(b.splat(0, x), x, name=name)


def absolute(b: Builder, x: Node, name: str | None = None) -> Node:
    """|x| as max(x, -x): exact for floats and signed integers; an unsigned x is its own
    absolute value (its -x wraps around to a larger value)."""
    if x.type.dtype.kind in "ub":
        return x
    return b.Max(x, negate(b, x), name=name)


def ceil(b: Builder, x: Node, name: str | None = None) -> Node:
    """ceil(x) = -floor(-x), exact."""
    return negate(b, b.Floor(negate(b, x)), name=name)


def trunc(b: Builder, x: Node, name: str | None = None) -> Node:
    """Round toward zero: floor for x >= 0, ceil below."""
    return b.Select(b.Compare(x, b.splat(0.0, x), predicate="lt"), ceil(b, x), b.Floor(x), name=name)


def constant(b: Builder, array: np.ndarray, label: str) -> Node:
    """A Constant holding ``array`` exactly (dtype kept), named under the builder's prefix."""
    return b.constant(array, f"{b.prefix}{label}", dtype=array.dtype)


def value_dtype(value: Node | np.ndarray) -> np.dtype:
    """The dtype of a load-time array or a graph node."""
    return value.dtype if isinstance(value, np.ndarray) else value.type.dtype


def log_softmax(b: Builder, x: Node, axis: int, name: str | None = None) -> Node:
    """One LogSoftmax node along ``axis`` (its lowering never takes the log of a zero)."""
    return b.LogSoftmax(x, axis=axis, name=name)
