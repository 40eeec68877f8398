"""The values an ONNX import works with: tensors (graph nodes or load-time arrays),
sequences, empty optionals; the ranks an op allows for an input; and the ``Scope`` an
importer may reach beyond its own node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx

from glow_core.errors import UnsupportedOpError
from glow_core.graph.node import Node

Value = Node | np.ndarray
"""A tensor during import: a graph node, or an array whose value is known at load time."""


class SequenceValue(list):
    """An ONNX sequence during import: its elements, one Value each, in order.

    A sequence is load-time structure, not a run-time value: its length is known while
    loading (a sequence input's length comes with the call being specialized), so each
    element is an ordinary tensor of the graph. It is a ``list`` subclass so that an
    importer returning one sequence is not mistaken for one returning several outputs.
    """

    def __repr__(self) -> str:
        return f"SequenceValue({list.__repr__(self)})"


class EmptyOptional:
    """The value of an empty ONNX optional (``EMPTY_OPTIONAL``, the only instance).

    A present optional is simply its element (a tensor or a sequence). ``None`` cannot mark
    the empty one: importers already return None for an output they cannot produce.
    """

    _instance: EmptyOptional | None = None

    def __new__(cls) -> EmptyOptional:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "EMPTY_OPTIONAL"


EMPTY_OPTIONAL = EmptyOptional()

AnyValue = Value | SequenceValue | EmptyOptional
"""Whatever an ONNX name may hold during import: a tensor, a sequence, or an empty optional."""


@dataclass(frozen=True, slots=True)
class Rank:
    """The ranks ONNX allows for one input of an op: ``low`` to ``high`` (None: no bound).

    Importers unpack shapes (``n, c, h, w = x.type.shape``) and index dims by position, so
    an input of the wrong rank must be refused before the importer runs, with a message
    naming the input; declaring the rule in the importer table (``@importer(ranks=...)``)
    keeps that fact beside the op instead of in an ``if`` per importer.
    """

    low: int
    high: int | None

    @classmethod
    def exactly(cls, rank: int) -> Rank:
        return cls(rank, rank)

    @classmethod
    def at_least(cls, rank: int) -> Rank:
        return cls(rank, None)

    @classmethod
    def between(cls, low: int, high: int) -> Rank:
        return cls(low, high)

    def allows(self, rank: int) -> bool:
        return rank >= self.low and (self.high is None or rank <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"rank {self.low} or more"
        if self.high == self.low:
            return f"rank {self.low}"
        if self.high == self.low + 1:
            return f"rank {self.low} or {self.high}"
        return f"rank {self.low} to {self.high}"


RankRule = int | Rank
"""An input's allowed rank as declared: an exact rank or a ``Rank``."""


def as_rank(rule: RankRule) -> Rank:
    return Rank.exactly(rule) if isinstance(rule, int) else rule


class LoadTimeValueError(UnsupportedOpError):
    """An input glow needs at load time (a shape, axes, a condition) is computed at run time.

    ``inputs`` names the graph inputs the value is computed from: passing their values to
    ``load_onnx(static_inputs=...)`` (shape specialization) makes the model loadable.
    """

    def __init__(self, message: str, inputs: Sequence[str] = ()):
        super().__init__(message)
        self.inputs = tuple(inputs)


class Scope(Protocol):
    """What an importer may reach beyond its own node: the tensors known so far."""

    values: dict[str, AnyValue]

    def materialize(self, name: str) -> Node:
        """The tensor ``name`` as a graph node (a load-time array becomes a Constant)."""
        ...

    def inputs_behind(self, name: str) -> frozenset[str]:
        """The graph inputs whose values tensor ``name`` is computed from."""
        ...

    def known_value(self, name: str) -> np.ndarray | None:
        """The value of tensor ``name`` if it can be computed at load time (from constants only)."""
        ...

    def import_graph(self, graph: onnx.GraphProto, inputs: Sequence[AnyValue] = ()) -> list[AnyValue]:
        """Import a subgraph (an If branch, a loop iteration) with ``inputs`` bound; its outputs."""
        ...


def kind_of(value: AnyValue) -> str:
    """How a value reads in an error message: "a tensor", "a sequence of 3 tensors"..."""
    if isinstance(value, SequenceValue):
        return f"a sequence of {len(value)} tensor{'' if len(value) == 1 else 's'}"
    if isinstance(value, EmptyOptional):
        return "an empty optional"
    return "a tensor"
