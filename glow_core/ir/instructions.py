"""The address-only instruction IR.

Every operand of an instruction is a *value with an address*: a ``WeightVar`` (a constant
or a placeholder, living in the constants or placeholders region), an ``AllocActivation``
(a buffer in the activations arena, between its alloc and dealloc instructions), or a
``TensorView`` (the same bytes as another value, seen with another type: reshape is a view,
never a copy). Operands carry their role (@in, @out, @inout), which the IR optimizer reads.

A primitive becomes the same-named instruction: its declared operands are @in, and an
``@out dest`` comes first, as in Glow. A predicated instruction has one more operand, last,
with role @pred: a one-element bool buffer; when it holds false at run time the backend
skips the instruction. Every pass that reads all operands (liveness, buffer placement)
sees the predicate as a read; ``sources`` (what kernels compute from) does not include it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.spec import OpSpec
from glow_core.types import Type


class Role(enum.Enum):
    IN = "@in"
    OUT = "@out"
    INOUT = "@inout"
    PRED = "@pred"


class WeightKind(enum.Enum):
    CONSTANT = "constant"
    INPUT = "input"
    OUTPUT = "output"


class Value:
    """Anything an instruction operand can name: it has a type and a name."""

    name: str
    type: Type

    @property
    def root(self) -> Value:
        """The value owning the bytes (a view's source, followed to the end)."""
        return self


@dataclass(eq=False)
class WeightVar(Value):
    """A constant (private, with a value) or a placeholder (public: input or output)."""

    name: str
    type: Type
    kind: WeightKind
    value: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(eq=False)
class Instr:
    """One instruction: kind, operands with roles, attributes."""

    kind: str
    name: str
    operands: list[tuple[Value, Role]]
    attrs: dict[str, Any] = field(default_factory=dict)
    spec: OpSpec | None = None  # the primitive's declaration, for primitive instructions

    def values(self, *roles: Role) -> list[Value]:
        """Operand values with one of ``roles`` (all when none given)."""
        return [v for v, r in self.operands if not roles or r in roles]

    @property
    def dest(self) -> Value:
        return self.operands[0][0]

    @property
    def sources(self) -> list[Value]:
        return self.values(Role.IN)

    @property
    def predicate(self) -> Value | None:
        """The bool buffer that must hold true for this instruction to run (None: always)."""
        preds = self.values(Role.PRED)
        return preds[0] if preds else None

    def replace_operand(self, old: Value, new: Value) -> None:
        """Every operand ``old`` becomes ``new`` (the list is left alone where none is)."""
        if any(v is old for v, _ in self.operands):
            self.operands = [(new if v is old else v, r) for v, r in self.operands]


@dataclass(eq=False)
class AllocActivation(Instr, Value):
    """Reserve an activation buffer of ``type`` (an instruction that is also a value)."""

    type: Type = field(default=None)  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(eq=False)
class DeallocActivation(Instr):
    """Release an activation buffer: after this its bytes may hold another buffer."""

    @property
    def alloc(self) -> AllocActivation:
        return self.operands[0][0]  # type: ignore[return-value]


@dataclass(eq=False)
class TensorView(Instr, Value):
    """Another type over the bytes of ``source`` starting at element ``offset`` (no copy)."""

    type: Type = field(default=None)  # type: ignore[assignment]
    offset: int = 0

    @property
    def source(self) -> Value:
        return self.operands[0][0]

    @property
    def root(self) -> Value:
        return self.source.root

    def __repr__(self) -> str:
        return f"%{self.name}"


def make_alloc(name: str, type: Type) -> AllocActivation:
    return AllocActivation(kind="AllocActivation", name=name, operands=[], type=type)


def dealloc_name(alloc_name: str) -> str:
    """The name of the dealloc of the buffer ``alloc_name`` (the text form leaves it out)."""
    return f"dealloc_{alloc_name}"


def make_dealloc(alloc: AllocActivation) -> DeallocActivation:
    return DeallocActivation(
        kind="DeallocActivation", name=dealloc_name(alloc.name), operands=[(alloc, Role.IN)]
    )


def make_view(name: str, source: Value, type: Type, offset: int = 0) -> TensorView:
    return TensorView(kind="TensorView", name=name, operands=[(source, Role.IN)], type=type, offset=offset)


def make_copy(name: str, dest: Value, src: Value, predicate: Value | None = None) -> Instr:
    operands = [(dest, Role.OUT), (src, Role.IN)]
    if predicate is not None:
        operands.append((predicate, Role.PRED))
    return Instr(kind="Copy", name=name, operands=operands)


MEMORY_KINDS = frozenset({"AllocActivation", "DeallocActivation", "TensorView"})
"""Instruction kinds that only reserve, release or re-view bytes: no kernel runs for them."""


@dataclass
class IRFunction:
    """A scheduled list of instructions over weights and activations."""

    name: str
    weights: list[WeightVar]
    instrs: list[Instr]
    memory_plan: Any = None  # the MemoryPlan, attached by the planner stage
    release_constants: bool = False
    """Set by ``glow_core.compile``, whose caller keeps only the compiled function: a backend
    that copies the constants into storage of its own may drop each one's value
    (``WeightVar.value = None``) once copied, so a weight is in memory once, not twice,
    while that storage fills (the graph is dropped before code generation then)."""

    @property
    def inputs(self) -> list[WeightVar]:
        return [w for w in self.weights if w.kind is WeightKind.INPUT]

    @property
    def outputs(self) -> list[WeightVar]:
        return [w for w in self.weights if w.kind is WeightKind.OUTPUT]

    @property
    def constants(self) -> list[WeightVar]:
        return [w for w in self.weights if w.kind is WeightKind.CONSTANT]

    @property
    def allocs(self) -> list[AllocActivation]:
        return [i for i in self.instrs if isinstance(i, AllocActivation)]

    def compute_instrs(self) -> list[Instr]:
        """Instructions that do work (not alloc, dealloc or view)."""
        return [i for i in self.instrs if i.kind not in MEMORY_KINDS]
