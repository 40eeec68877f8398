"""Running an IR function on host memory: three numpy byte arenas at the planned offsets.

Three byte arenas mirror the memory plan's regions (constants, placeholders, activations).
Every operand is a numpy view into its arena at its planned offset, so a wrong memory plan
gives wrong answers here, as it would on a device. A backend that computes on the host
subclasses ``ArenaFunction`` and says how one primitive instruction becomes a step; the
interpreter runs reference semantics, the SDK template runs a vendor's kernels.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

import numpy as np

from glow_core.errors import VerifyError
from glow_core.ir.instructions import (
    AllocActivation,
    DeallocActivation,
    Instr,
    IRFunction,
    TensorView,
    Value,
    WeightKind,
)
from glow_core.ir.memory import MemoryPlan
from glow_core.runtime.compiled import CompiledFunction
from glow_core.types import Type

POISON_BYTE = 0xFF
"""Every byte 0xFF: NaN for float kinds, -1 for integers; an unwritten element shows."""

Step = Callable[[], None]


class ArenaFunction(CompiledFunction):
    """A compiled IR function whose steps run on views into host arenas."""

    def __init__(self, ir: IRFunction, poison: bool = True):
        super().__init__(ir)
        plan: MemoryPlan = ir.memory_plan
        if plan is None:
            raise VerifyError(f"IR function {ir.name!r} has no memory plan")
        self.poison = poison
        self.constants = np.zeros(plan.constant_bytes, np.uint8)
        self.placeholders = np.zeros(plan.placeholder_bytes, np.uint8)
        self.activations = np.zeros(plan.arena_bytes, np.uint8)
        self.views: dict[Value, np.ndarray] = {}
        for w in ir.weights:
            if w.kind is WeightKind.CONSTANT:
                view = arena_view(self.constants, plan.constant_offsets[w.name], w.type)
                view[...] = w.value
            else:
                view = arena_view(self.placeholders, plan.placeholder_offsets[w.name], w.type)
            self.views[w] = view
        self.steps: list[Step] = []
        for instr in ir.instrs:
            self._prepare(instr, plan)
        self.inputs = {w.name: self.views[w] for w in ir.inputs}
        self.outputs = {w.name: self.views[w] for w in ir.outputs}

    def _prepare(self, instr: Instr, plan: MemoryPlan) -> None:
        if isinstance(instr, AllocActivation):
            self.views[instr] = arena_view(self.activations, plan.offset_of(instr.name), instr.type)
        elif isinstance(instr, TensorView):
            flat = self.views[instr.source].reshape(-1)
            window = flat[instr.offset : instr.offset + instr.type.size]
            self.views[instr] = window.view(instr.type.dtype).reshape(instr.type.shape)
        elif isinstance(instr, DeallocActivation):
            pass
        elif instr.kind == "Copy":
            self._add_step(instr, _copy_step(self.views[instr.dest], self.views[instr.sources[0]]))
        else:
            dest = self.views[instr.dest]
            sources = [self.views[v] for v in instr.sources]
            self._add_step(instr, self.make_step(instr, dest, sources))

    def _add_step(self, instr: Instr, step: Step) -> None:
        """Append ``step``, guarded by the instruction's predicate when it has one."""
        if instr.predicate is not None:
            step = _predicated(self.views[instr.predicate], step)
        self.steps.append(step)

    @abstractmethod
    def make_step(self, instr: Instr, dest: np.ndarray, sources: list[np.ndarray]) -> Step:
        """A callable that computes ``instr`` from ``sources`` into ``dest`` (views, fixed)."""

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.poison:
            self.activations.fill(POISON_BYTE)
            for out in self.outputs.values():
                out.reshape(-1).view(np.uint8).fill(POISON_BYTE)  # reshape: 0-d views cannot change dtype
        for name, value in inputs.items():
            self.inputs[name][...] = value
        for step in self.steps:
            step()
        return {name: view.copy() for name, view in self.outputs.items()}


def arena_view(arena: np.ndarray, offset: int, type: Type) -> np.ndarray:
    """The typed view of ``type`` at byte ``offset`` of a byte arena."""
    return arena[offset : offset + type.nbytes].view(type.dtype).reshape(type.shape)


def _predicated(flag: np.ndarray, step: Step) -> Step:
    """``step`` run only when the one-element bool ``flag`` holds true at that moment."""
    cell = flag.reshape(-1)

    def guarded() -> None:
        if cell[0]:
            step()

    return guarded


def _copy_step(dest: np.ndarray, src: np.ndarray) -> Step:
    def step() -> None:
        dest[...] = src

    return step
