"""Backends whose partitions hand over wrong boundary tensors, though each run alone looks right.

Both are the full interpreter, so the models layer (one run of one whole-model function)
passes on them; only a partitioned run, and a second run, can tell.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from glow_interpreter.backend import InterpreterBackend, InterpreterOptions

from glow_core.backend import BackendInfo
from glow_core.ir.instructions import IRFunction
from glow_core.runtime.compiled import CompiledFunction


class _Wrapped(CompiledFunction):
    """A compiled function whose results pass through ``tamper`` on their way out."""

    def __init__(self, inner: CompiledFunction, ir: IRFunction, tamper: Any):
        super().__init__(ir)
        self.inner, self.tamper = inner, tamper
        self.kept: dict[str, np.ndarray] | None = None

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.tamper(self, self.inner.run(inputs))


def _first_run_forever(fn: _Wrapped, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An output buffer written on the first run only: later runs return its stale contents."""
    if fn.kept is None:
        fn.kept = outputs
    return {name: value.copy() for name, value in fn.kept.items()}


def _all_but_the_first(fn: _Wrapped, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A function with several outputs returns only the first (by name); one output is kept."""
    first = sorted(outputs)[0]
    return {first: outputs[first]}


class _Tampering(InterpreterBackend):
    name = "tampering"
    tamper: Any = None

    def info(self) -> BackendInfo:
        return super().info().model_copy(update={"name": self.name})

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> CompiledFunction:  # type: ignore[override]
        return _Wrapped(super().compile(ir, options), ir, type(self).tamper)


class StaleOutputs(_Tampering):
    """Every compiled function returns its first run's results again on every later run."""

    name = "stale-outputs"
    tamper = staticmethod(_first_run_forever)


class DropsOutputs(_Tampering):
    """A compiled function with several outputs returns only one of them."""

    name = "drops-outputs"
    tamper = staticmethod(_all_but_the_first)


PARTITION_FAKES = (StaleOutputs, DropsOutputs)
