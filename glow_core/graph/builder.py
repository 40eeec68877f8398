"""Writing graphs in Python.

``Builder.create`` (and the CamelCase method generated for every declared operator, e.g.
``b.MatMul(x, w)``) infers the result type at creation, so a shape error names the node
right where it was made. The snake_case methods add what users expect from numpy and ONNX:
broadcasting, constants from arrays, and high-level layers (``b.conv``, ``b.matmul``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from glow_core.errors import GlowError, ShapeError
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.limits import current_limits
from glow_core.spec import spec_of
from glow_core.types import ElemKind, Type

Operand = Node | np.ndarray | float | int


class Builder:
    """Creates nodes in one function; names are made unique within the module.

    Every node it creates carries ``predicate`` (None: unconditional), so a lowering or a
    rewrite of a predicated node builds a predicated replacement.
    """

    def __init__(self, fn: Function, *, prefix: str = "", predicate: Node | None = None):
        self.fn = fn
        self.module = fn.module
        self.prefix = prefix
        self.predicate = predicate

    # ---- generic creation --------------------------------------------------------------

    def create(self, kind: str, *inputs: Node, name: str | None = None, **attrs: Any) -> Node:
        """Create a node of any declared kind; the type rule runs now."""
        spec = spec_of(kind)
        node_name = self.module.unique_name(name or f"{self.prefix}{kind.lower()}")
        try:
            full = spec.complete_attrs(attrs)
            type = spec.infer_type([i.type for i in inputs], full)
            # Checked here, the one place every node's type is made: a model's huge Expand
            # or Pad is refused at load, naming the node, long before a buffer is planned.
            current_limits().check_tensor("its result", type.shape, type.elem.itemsize)
        except ShapeError as err:
            raise err.__class__(f"{kind} {node_name!r}: {err}") from None
        return self.fn.add(Node(spec, list(inputs), full, type, node_name, self.predicate))

    def __getattr__(self, kind: str) -> Any:
        # b.MatMul(x, w, name=...) for every declared operator kind.
        if not kind[:1].isupper():
            raise AttributeError(kind)
        try:
            spec_of(kind)
        except KeyError:
            raise AttributeError(f"no operator named {kind!r}") from None
        return functools.partial(self.create, kind)

    # ---- storage -------------------------------------------------------------------------

    def placeholder(self, name: str, shape: Sequence[int], elem: ElemKind = ElemKind.float32) -> Placeholder:
        """A new public input."""
        return self.module.create_placeholder(name, Type(tuple(shape), elem))

    def constant(self, value: np.ndarray | float | int, name: str = "const", dtype: Any = None) -> Constant:
        """A new private constant holding ``value`` (stored contiguous): the one way to make
        a constant while building; the importers' and passes' helpers call this.

        Python floats and numpy's default arrays are float64, which is rarely what a model
        means: without ``dtype`` they become float32. Pass ``dtype`` to keep an array
        exactly as it is (``dtype=array.dtype``) or to choose the kind (``np.float64``)."""
        array = np.asarray(value, dtype=dtype, order="C")
        if dtype is None and array.dtype == np.float64:
            array = array.astype(np.float32)
        return self.module.create_constant(name, array)

    def save(self, value: Node, name: str) -> Placeholder:
        """Make ``value`` a function result named ``name`` (written only if the predicate holds)."""
        return self.fn.save(value, name, self.predicate)

    def splat(self, value: float, like: Node | Type, name: str | None = None) -> Node:
        """A tensor shaped and typed like ``like`` filled with ``value``."""
        t = like.type if isinstance(like, Node) else like
        return self.create("Splat", shape=t.shape, value=value, elem=t.elem.name, name=name)

    # ---- broadcasting helpers --------------------------------------------------------

    def as_node(self, value: Operand, like: Node | None = None) -> Node:
        """Nodes pass through; arrays and scalars become constants (of ``like``'s kind)."""
        if isinstance(value, Node):
            return value
        dtype = like.type.dtype if like is not None else None
        return self.constant(
            np.asarray(value, dtype=dtype), name="scalar" if np.ndim(value) == 0 else "const"
        )

    def broadcast_to(self, x: Node, shape: Sequence[int]) -> Node:
        """``x`` repeated up to ``shape`` (numpy rules); a no-op when it already has it."""
        shape = tuple(shape)
        if x.type.shape == shape:
            return x
        if x.type.rank < len(shape):
            x = self.Reshape(x, shape=(1,) * (len(shape) - x.type.rank) + x.type.shape)
        return self.Broadcast(x, shape=shape)

    def _binary(self, kind: str, lhs: Operand, rhs: Operand, name: str | None) -> Node:
        if not isinstance(lhs, Node):
            lhs = self.as_node(lhs, like=rhs if isinstance(rhs, Node) else None)
        rhs = self.as_node(rhs, like=lhs)
        try:
            shape = np.broadcast_shapes(lhs.type.shape, rhs.type.shape)
        except ValueError:
            raise ShapeError(f"{kind}: shapes {lhs.type} and {rhs.type} do not broadcast") from None
        return self.create(kind, self.broadcast_to(lhs, shape), self.broadcast_to(rhs, shape), name=name)

    def add(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Add", lhs, rhs, name)

    def sub(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Sub", lhs, rhs, name)

    def mul(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Mul", lhs, rhs, name)

    def div(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Div", lhs, rhs, name)

    def max(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Max", lhs, rhs, name)

    def min(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Min", lhs, rhs, name)

    def pow(self, lhs: Operand, rhs: Operand, name: str | None = None) -> Node:
        return self._binary("Pow", lhs, rhs, name)

    # ---- layers --------------------------------------------------------------------------

    def relu(self, x: Node, name: str | None = None) -> Node:
        return self.Relu(x, name=name)

    def reshape(self, x: Node, shape: Sequence[int], name: str | None = None) -> Node:
        """Reshape with ONNX conventions: 0 copies the input dim, -1 is inferred."""
        dims = [x.type.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        if dims.count(-1) > 1:
            raise ShapeError(f"reshape {name or ''}: more than one -1 in {tuple(shape)}")
        if -1 in dims:
            known = int(np.prod([d for d in dims if d != -1]))
            if known == 0 or x.type.size % known:
                raise ShapeError(f"reshape {name or ''}: cannot reshape {x.type} to {tuple(shape)}")
            dims[dims.index(-1)] = x.type.size // known
        if tuple(dims) == x.type.shape:
            return x
        return self.Reshape(x, shape=tuple(dims), name=name)

    def transpose(self, x: Node, shuffle: Sequence[int], name: str | None = None) -> Node:
        return self.Transpose(x, shuffle=tuple(shuffle), name=name)

    def matmul(self, lhs: Node, rhs: Node, name: str | None = None) -> Node:
        """numpy/ONNX matmul: 1-D promotion and batch broadcasting, lowered to (Batch)MatMul."""
        a, b = lhs.type.shape, rhs.type.shape
        if len(a) == 0 or len(b) == 0:
            raise ShapeError(f"matmul {name or ''}: operands must have rank >= 1: {lhs.type}, {rhs.type}")
        if len(a) == 1:
            lhs = self.reshape(lhs, (1, a[0]))
        if len(b) == 1:
            rhs = self.reshape(rhs, (b[0], 1))
        out_shape = _matmul_shape(lhs.type, rhs.type, a, b)
        if lhs.type.rank == 2 and rhs.type.rank == 2:
            result = self.MatMul(lhs, rhs, name=name)
        elif rhs.type.rank == 2:
            # [..., m, k] x [k, n]: fold the batch into the rows, one big GEMM.
            rows = self.reshape(lhs, (-1, lhs.type.shape[-1]))
            result = self.MatMul(rows, rhs, name=name)
        else:
            result = self._batch_matmul(lhs, rhs, name)
        return self.reshape(result, out_shape)

    def _batch_matmul(self, lhs: Node, rhs: Node, name: str | None) -> Node:
        batch = tuple(np.broadcast_shapes(lhs.type.shape[:-2], rhs.type.shape[:-2]))
        lhs = self.broadcast_to(lhs, batch + lhs.type.shape[-2:])
        rhs = self.broadcast_to(rhs, batch + rhs.type.shape[-2:])
        lhs3 = self.reshape(lhs, (-1,) + lhs.type.shape[-2:])
        rhs3 = self.reshape(rhs, (-1,) + rhs.type.shape[-2:])
        return self.BatchMatMul(lhs3, rhs3, name=name)

    def conv(
        self,
        x: Node,
        w: Node,
        bias: Node | None = None,
        *,
        strides: Sequence[int] = (1, 1),
        pads: Sequence[int] = (0, 0, 0, 0),
        dilations: Sequence[int] = (1, 1),
        group: int = 1,
        name: str | None = None,
    ) -> Node:
        """2-D convolution (NCHW) with an optional bias, as one high-level Conv node."""
        if bias is None:
            bias = self.constant(np.zeros(w.type.shape[0]), "zero_bias", dtype=w.type.dtype)
        return self.Conv(x, w, bias, strides=strides, pads=pads, dilations=dilations, group=group, name=name)

    def fully_connected(self, x: Node, w: Node, bias: Node, name: str | None = None) -> Node:
        """x[n,k] @ w[k,m] + bias[m]."""
        return self.FullyConnected(x, w, bias, name=name)


def _matmul_shape(lhs: Type, rhs: Type, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy matmul result shape of the original (possibly 1-D) operands."""
    if lhs.shape[-1] != rhs.shape[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {lhs} vs {rhs}")
    try:
        batch = tuple(np.broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions do not broadcast: {lhs} vs {rhs}") from None
    shape = batch + (lhs.shape[-2], rhs.shape[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


__all__ = ["Builder", "GlowError"]
