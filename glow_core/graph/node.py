"""Graph nodes: one generic ``Node`` driven by its ``OpSpec``, plus the two storage kinds.

A node has exactly one result, whose ``type`` is fixed at creation by the spec's type rule.
Use lists are kept on every node (who reads me, at which operand position), so
replace-all-uses and dead-code checks are O(uses), as in Glow.

A node may carry a *predicate* (as in Glow): a one-element bool value read at run time;
when it is false the node's instructions are skipped and its result is undefined. The
predicate is not an operand (type rules and kernels never see it) but it is a use, listed
in the predicate's ``users`` at position ``PREDICATE``, so scheduling, dead-code
elimination and replace-all-uses treat it like any other read.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from glow_core.errors import ShapeError
from glow_core.spec import OpSpec
from glow_core.types import ElemKind, Type

PREDICATE = -1
"""The use-list position of a predicate read (operands count from 0)."""

_EDIT_STAMPS = itertools.count(1)
_last_edit = 0


def note_edit() -> None:
    """Record that some function's graph changed (a node added or erased, an operand or a
    predicate repointed), so orders cached against ``last_edit()`` are recomputed.

    Every stamp is new (``itertools.count`` is atomic), so even racing writers can never
    bring back a stamp that a cache was taken at."""
    global _last_edit
    _last_edit = next(_EDIT_STAMPS)


def last_edit() -> int:
    """The stamp of the most recent graph edit anywhere in the process."""
    return _last_edit


class Node:
    """An operator application: spec, operand nodes, attributes, result type, name."""

    __slots__ = ("_inputs", "_predicate", "attrs", "name", "spec", "type", "users")

    def __init__(
        self,
        spec: OpSpec,
        inputs: list[Node],
        attrs: dict[str, Any],
        type: Type,
        name: str,
        predicate: Node | None = None,
    ):
        self.spec = spec
        self.name = name
        self.attrs = attrs
        self.type = type
        self.users: list[tuple[Node, int]] = []
        self._inputs: list[Node] = []
        self._predicate: Node | None = None
        for value in inputs:
            self._inputs.append(value)
            value.users.append((self, len(self._inputs) - 1))
        self.predicate = predicate

    @property
    def kind(self) -> str:
        return self.spec.name

    @property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(self._inputs)

    @property
    def predicate(self) -> Node | None:
        """The bool value that, when false at run time, skips this node (None: always runs)."""
        return self._predicate

    @predicate.setter
    def predicate(self, value: Node | None) -> None:
        if value is not None and (value.type.elem is not ElemKind.bool or value.type.size != 1):
            raise ShapeError(
                f"the predicate of {self.name!r} must hold one bool element, "
                f"got {value.type} ({value.name!r})"
            )
        if self._predicate is not None:
            self._predicate.users.remove((self, PREDICATE))
        self._predicate = value
        if value is not None:
            value.users.append((self, PREDICATE))
        note_edit()

    @property
    def dependencies(self) -> tuple[Node, ...]:
        """What must be computed before this node: its operands, then its predicate."""
        return self.inputs if self._predicate is None else (*self._inputs, self._predicate)

    def set_input(self, index: int, value: Node) -> None:
        """Point operand ``index`` (or the predicate, at ``PREDICATE``) at ``value``, keeping
        both use lists right."""
        if index == PREDICATE:
            self.predicate = value
            return
        old = self._inputs[index]
        old.users.remove((self, index))
        self._inputs[index] = value
        value.users.append((self, index))
        note_edit()

    def drop_inputs(self) -> None:
        """Forget all operands and the predicate (the node is being erased)."""
        for index, value in enumerate(self._inputs):
            value.users.remove((self, index))
        self._inputs = []
        self.predicate = None  # also notes the edit

    def operand(self, name: str) -> Node:
        """The operand declared under ``name``."""
        return self._inputs[self.spec.operands.index(name)]

    def __getattr__(self, name: str) -> Any:
        # Declared operand and attribute names read like fields: conv.filter, conv.strides.
        spec = object.__getattribute__(self, "spec")
        if name in spec.attrs:
            return self.attrs[name]
        if name in spec.operands and not spec.variadic:
            return self.operand(name)
        raise AttributeError(f"{spec.name} node has no operand or attribute {name!r}")

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r} : {self.type}>"


STORAGE_SPECS: dict[str, OpSpec] = {}


def _storage_spec(name: str, doc: str) -> OpSpec:
    spec = OpSpec(name=name, doc=doc, operands=(), attrs={}, type_rule=lambda: None)  # type: ignore[arg-type,return-value]
    STORAGE_SPECS[name] = spec
    return spec


PLACEHOLDER = _storage_spec("Placeholder", "Public storage: a function's inputs and outputs.")
CONSTANT = _storage_spec("Constant", "Private storage: weights the optimizer may fold or drop.")


class Placeholder(Node):
    """A public tensor bound at run time (an input, or an output the function writes)."""

    __slots__ = ("is_output",)

    def __init__(self, name: str, type: Type, *, is_output: bool = False):
        super().__init__(PLACEHOLDER, [], {}, type, name)
        self.is_output = is_output


class Constant(Node):
    """A private tensor with a value known at compile time."""

    __slots__ = ("value",)

    def __init__(self, name: str, value: np.ndarray, type: Type | None = None):
        value = np.asarray(value, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        super().__init__(CONSTANT, [], {}, type or Type.of(value), name)
        self.value = value


def is_storage(node: Node) -> bool:
    """True for Placeholders and Constants (they live in the Module, not a Function)."""
    return node.spec.name in STORAGE_SPECS
