"""CompiledFunction: what a backend returns, run as ``run({name: array}) -> {name: array}``.

The base class owns everything every backend must do the same way: refusing inputs with
a wrong name, dtype or shape before anything runs, returning outputs by name, and the
threading contract.

Threads: ``run`` may be called from many threads at once, on every backend. A backend
whose ``execute`` cannot overlap with itself does nothing: ``run`` holds a lock per
function around it (``concurrent_runs`` is False by default). A backend that keeps every
run's mutable memory apart (a ``StatePool`` of per-call arenas, constants shared) sets
``concurrent_runs`` and its runs overlap. See docs/architecture.md, "Threads".
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from glow_core import progress
from glow_core.errors import BackendError, InputError
from glow_core.ir.instructions import IRFunction
from glow_core.types import Type


class CompiledFunction(ABC):
    """A function compiled for one backend, with fixed input and output types."""

    concurrent_runs: bool = False
    """Whether ``execute`` may run on several threads at once. False (the default, safe for
    a backend that says nothing): ``run`` serializes its calls with this function's lock.
    True only where every byte a run writes is that run's own (see ``StatePool``)."""

    def __init__(self, ir: IRFunction):
        self.name = ir.name
        self.input_types: dict[str, Type] = {w.name: w.type for w in ir.inputs}
        self.output_types: dict[str, Type] = {w.name: w.type for w in ir.outputs}
        # Reentrant: a backend's profile runs ``execute`` while it already holds the lock.
        self._serial = threading.RLock()

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs for ``inputs``; every input is checked before anything runs. Safe to call
        from several threads at once (overlapping where ``concurrent_runs``)."""
        arrays = self.check_inputs(inputs)
        with self.serialized():
            return self.execute(arrays)

    def serialized(self) -> AbstractContextManager[object]:
        """Hold while touching what runs share: this function's lock when its runs cannot
        overlap, nothing when they can (each run then brings its own state)."""
        return nullcontext() if self.concurrent_runs else self._serial

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.run(inputs)

    def check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs as contiguous arrays, or InputError saying what is wrong and how to fix it."""
        unknown = sorted(set(inputs) - set(self.input_types))
        missing = sorted(set(self.input_types) - set(inputs))
        if unknown or missing:
            raise InputError(
                f"{self.name}: inputs do not match: unknown {unknown}, missing {missing}; "
                f"expected {self._signature()}"
            )
        arrays = {}
        for name, expected in self.input_types.items():
            value = inputs[name]
            if not isinstance(value, np.ndarray):
                raise InputError(
                    f"{self.name}: input {name!r} must be a numpy array, got {type(value).__name__}"
                )
            if value.dtype != expected.dtype:
                raise InputError(
                    f"{self.name}: input {name!r} has dtype {value.dtype}, expected {expected.dtype} "
                    f"({expected}); convert it with .astype(np.{expected.dtype})"
                )
            if tuple(value.shape) != expected.shape:
                raise InputError(
                    f"{self.name}: input {name!r} has shape {tuple(value.shape)}, expected {expected.shape}; "
                    "recompile with input_shapes={...} for another shape"
                )
            arrays[name] = np.asarray(value, order="C")
        return arrays

    def _signature(self) -> str:
        return ", ".join(f"{n}: {t}" for n, t in self.input_types.items())

    def profile(self, inputs: Mapping[str, np.ndarray], runs: int = 5) -> str:
        """A Markdown table of the time each kernel took: medians of ``runs`` runs after one
        warm-up, slowest first (``glow run --profile``). Inputs and ``runs`` are checked here;
        the timing is the backend's ``kernel_times``."""
        if runs < 1:
            raise InputError(f"{self.name}: profile runs must be at least 1, got {runs}")
        arrays = self.check_inputs(inputs)
        progress.step(f"profiling {self.name}")
        with self.serialized():
            return f"median of {runs} profiled runs\n\n" + self.kernel_times(arrays, runs)

    def kernel_times(self, inputs: dict[str, np.ndarray], runs: int) -> str:
        """The table ``profile`` prints, for already-checked inputs. Backends that can time
        their own kernels override this; the others refuse, naming the backends that can."""
        raise BackendError(
            f"{self.name}: {type(self).__name__} cannot time its kernels; profile on a backend "
            "that can (glow-cpu and glow-opencl do: --backend cpu)"
        )

    @abstractmethod
    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run with already-checked inputs; return fresh arrays by output name. Called under
        ``serialized()``: concurrently with itself only where ``concurrent_runs``."""
