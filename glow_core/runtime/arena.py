"""Running an IR function on host memory: three numpy byte arenas at the planned offsets.

Three byte arenas mirror the memory plan's regions (constants, placeholders, activations).
Every operand is a numpy view into its arena at its planned offset, so a wrong memory plan
gives wrong answers here, as it would on a device. A backend that computes on the host
subclasses ``ArenaFunction`` and says how one primitive instruction becomes a step; the
interpreter runs reference semantics, the SDK template runs a vendor's kernels.

Runs from several threads overlap: each borrows its own placeholders and activations
(an ``ArenaState``); the constants are shared and read-only.
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
from glow_core.runtime.state_pool import StatePool
from glow_core.types import Type

POISON_BYTE = 0xFF
"""Every byte 0xFF: NaN for float kinds, -1 for integers; an unwritten element shows."""

Step = Callable[[], None]


class ArenaFunction(CompiledFunction):
    """A compiled IR function whose steps run on views into host arenas.

    The constants arena is the function's, filled once and shared by every run. The
    placeholders and activations arenas, and the steps bound to views into them, form an
    ``ArenaState``: a run borrows one from ``states``, so runs from several threads overlap
    (``concurrent_runs``), each in its own arenas. The first state is made here, so a step a
    backend cannot make fails at compile time.
    """

    concurrent_runs = True

    def __init__(self, ir: IRFunction, poison: bool = True):
        super().__init__(ir)
        plan: MemoryPlan = ir.memory_plan
        if plan is None:
            raise VerifyError(f"IR function {ir.name!r} has no memory plan")
        self.ir, self.plan, self.poison = ir, plan, poison
        self.constants = np.zeros(plan.constant_bytes, np.uint8)
        self.constant_views: dict[Value, np.ndarray] = {}
        for w in ir.weights:
            if w.kind is WeightKind.CONSTANT:
                view = arena_view(self.constants, plan.constant_offsets[w.name], w.type)
                view[...] = w.value
                view.flags.writeable = False  # shared by concurrent runs: no step may write it
                self.constant_views[w] = view
        self.states: StatePool[ArenaState] = StatePool(lambda: ArenaState(self))
        self.states.add(ArenaState(self))

    @abstractmethod
    def make_step(self, instr: Instr, dest: np.ndarray, sources: list[np.ndarray]) -> Step:
        """A callable that computes ``instr`` from ``sources`` into ``dest`` (views, fixed).

        Called once per instruction for every ``ArenaState`` (so once per thread that runs
        at the same time as others): the step may close over its views, and must keep any
        other mutable scratch of its own in the closure, never on ``self``."""

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.states.borrow() as state:
            return state.run(inputs, self.poison)


class ArenaState:
    """One run's memory: placeholders and activations arenas, views into them and into the
    shared constants, and the steps bound to those views."""

    def __init__(self, fn: ArenaFunction):
        plan = fn.plan
        self.placeholders = np.zeros(plan.placeholder_bytes, np.uint8)
        self.activations = np.zeros(plan.arena_bytes, np.uint8)
        self.views: dict[Value, np.ndarray] = dict(fn.constant_views)
        for w in fn.ir.weights:
            if w.kind is not WeightKind.CONSTANT:
                self.views[w] = arena_view(self.placeholders, plan.placeholder_offsets[w.name], w.type)
        self.steps: list[Step] = []
        for instr in fn.ir.instrs:
            self._prepare(fn, instr, plan)
        self.inputs = {w.name: self.views[w] for w in fn.ir.inputs}
        self.outputs = {w.name: self.views[w] for w in fn.ir.outputs}

    def _prepare(self, fn: ArenaFunction, instr: Instr, plan: MemoryPlan) -> None:
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
            self._add_step(instr, fn.make_step(instr, dest, sources))

    def _add_step(self, instr: Instr, step: Step) -> None:
        """Append ``step``, guarded by the instruction's predicate when it has one."""
        if instr.predicate is not None:
            step = _predicated(self.views[instr.predicate], step)
        self.steps.append(step)

    def run(self, inputs: dict[str, np.ndarray], poison: bool) -> dict[str, np.ndarray]:
        """Inputs in, every step, fresh copies of the outputs out."""
        if poison:
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
