"""Executing the instruction IR on numpy arenas at the planned offsets.

Three byte arenas mirror the memory plan's regions (constants, placeholders, activations).
Every operand is a numpy view into its arena at its planned offset, so a wrong memory plan
gives wrong answers here, as it would on a device.
"""

from __future__ import annotations

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

# Every byte 0xFF: NaN for float kinds, -1 for integers; an unwritten element shows.
_POISON = 0xFF


class InterpretedFunction(CompiledFunction):
    """A compiled IR function whose steps are numpy calls on arena views."""

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
                view = _view(self.constants, plan.constant_offsets[w.name], w.type)
                view[...] = w.value
            else:
                view = _view(self.placeholders, plan.placeholder_offsets[w.name], w.type)
            self.views[w] = view
        self.steps: list[Callable[[], None]] = []
        for instr in ir.instrs:
            self._prepare(instr, plan)
        self.inputs = {w.name: self.views[w] for w in ir.inputs}
        self.outputs = {w.name: self.views[w] for w in ir.outputs}

    def _prepare(self, instr: Instr, plan: MemoryPlan) -> None:
        if isinstance(instr, AllocActivation):
            self.views[instr] = _view(self.activations, plan.offset_of(instr.name), instr.type)
        elif isinstance(instr, TensorView):
            source = self.views[instr.source].reshape(-1)
            start = instr.offset
            self.views[instr] = (
                source[start : start + instr.type.size].view(instr.type.dtype).reshape(instr.type.shape)
            )
        elif isinstance(instr, DeallocActivation):
            pass
        elif instr.kind == "Copy":
            self.steps.append(_copy_step(self.views[instr.dest], self.views[instr.sources[0]]))
        else:
            if instr.spec is None or not instr.spec.is_primitive:
                raise VerifyError(f"interpreter cannot run {instr.kind!r} ({instr.name!r}): not a primitive")
            dest = self.views[instr.dest]
            sources = [self.views[v] for v in instr.sources]
            self.steps.append(_primitive_step(instr, dest, sources))

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.poison:
            self.activations.fill(_POISON)
            for out in self.outputs.values():
                out.view(np.uint8).fill(_POISON)
        for name, value in inputs.items():
            self.inputs[name][...] = value
        for step in self.steps:
            step()
        return {name: view.copy() for name, view in self.outputs.items()}


def _view(arena: np.ndarray, offset: int, type) -> np.ndarray:
    return arena[offset : offset + type.nbytes].view(type.dtype).reshape(type.shape)


def _copy_step(dest: np.ndarray, src: np.ndarray) -> Callable[[], None]:
    def step() -> None:
        dest[...] = src

    return step


def _primitive_step(instr: Instr, dest: np.ndarray, sources: list[np.ndarray]) -> Callable[[], None]:
    spec, attrs = instr.spec, instr.attrs
    assert spec is not None

    def step() -> None:
        result = spec.evaluate(sources, attrs)
        # Cast to the dest kind (the reference may compute in float64), then store.
        dest[...] = np.asarray(result).astype(dest.dtype, copy=False).reshape(dest.shape)

    return step
