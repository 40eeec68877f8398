"""The models layer: every model of ``glow_core.model_zoo`` on the backend, against onnxruntime.

onnxruntime is the independent oracle (the primitives' references are glow's own); without
it these cases are skipped with the reason. Models whose weights are large (ResNet-50) are
slow on a reference backend and run only when asked (``--slow``): slowness is read from the
model, not from a list of names.

``model:mlp[threads]`` checks the threading contract: one compiled function run from several
threads at once, every result equal to the sequential result of the same input.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import onnx

import glow_core
from glow_conformance.case import MODEL_PREFIX, Case, one_line
from glow_conformance.results import PASS, Outcome, Verdict
from glow_conformance.threads import check_concurrent_runs
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.backend import Backend
from glow_core.errors import GlowError
from glow_core.model_zoo import LARGE_MODELS, MODELS, random_inputs
from glow_core.runtime.compiled import CompiledFunction

TOLERANCE = 1e-4
"""Largest ``max_relative_error`` against onnxruntime a model's outputs may have."""

BATCHES = (1, 3)
"""Batch sizes each model runs at (a slow model only at the first)."""

SLOW_WEIGHT_BYTES = 32 << 20
"""A model with more weight bytes than this is slow: it runs only with ``slow=True``."""


@functools.cache
def build_model(name: str, batch: int) -> onnx.ModelProto:
    """The zoo model (seeded, so every process builds the same one), built once per process."""
    return MODELS[name](batch=batch)


def weight_bytes(name: str) -> int:
    return sum(len(t.raw_data) or t.ByteSize() for t in build_model(name, BATCHES[0]).graph.initializer)


def slow_reason(name: str) -> str:
    """Why the zoo model ``name`` runs only when slow models are asked for (its weights), or
    "" when it always runs."""
    # Large models are not even built to be weighed (VGG-19 is 574 MB of weights).
    size = None if name in LARGE_MODELS else weight_bytes(name)
    if size is not None and size <= SLOW_WEIGHT_BYTES:
        return ""
    weights = "ImageNet-sized" if size is None else f"{size >> 20} MiB of"
    return f"slow ({weights} weights): run with --slow"


def has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True, eq=False)
class ModelCase(Case):
    """``model:resnet50[b1]``: one zoo model at one batch size."""

    model: str
    batch: int
    skip: str = ""
    """Why the case is not run here (no onnxruntime; a slow model without ``slow=True``);
    empty: it runs."""
    layer: ClassVar[str] = "models"

    def run(self, target: Backend) -> Verdict:
        if self.skip:
            return Verdict(Outcome.SKIPPED, self.skip)
        model = build_model(self.model, self.batch)
        inputs = random_inputs(model, seed=self.seed)
        compiled = _compile(model, target)
        if isinstance(compiled, Verdict):
            return compiled
        try:
            outputs = compiled.run(inputs)
        except Exception as err:
            return Verdict(Outcome.FAILED, f"crashed while running: {one_line(err)}")
        error = max_relative_error(outputs, onnxruntime_outputs(model, inputs))
        if error < TOLERANCE:
            return PASS
        return Verdict(
            Outcome.FAILED, f"max relative error {error:.3g} vs onnxruntime (tolerance {TOLERANCE:g})"
        )


def _compile(model: onnx.ModelProto, target: Backend) -> CompiledFunction | Verdict:
    """``model`` compiled for ``target``, or the verdict when it is not: a GlowError is the
    backend refusing (unsupported), anything else a crash of the compiler or the backend."""
    try:
        return glow_core.compile(model, backend=target)
    except GlowError as err:
        return Verdict(Outcome.UNSUPPORTED, one_line(err))
    except Exception as err:
        return Verdict(Outcome.FAILED, f"crashed while compiling: {one_line(err)}")


NO_ORACLE = (
    "onnxruntime (the oracle, a dependency of glow-conformance) is not installed: pip install onnxruntime"
)


@dataclass(frozen=True, eq=False)
class ThreadsCase(Case):
    """``model:mlp[threads]``: one compiled function called from ``THREADS`` threads at once."""

    model: str
    skip: str = ""
    """Why the case is not run here. Without onnxruntime it is skipped with the model cases,
    though it needs no oracle: the models layer is then reported as not run (INCOMPLETE), not
    as a pass that rests on the threads case alone."""
    layer: ClassVar[str] = "models"
    THREADS: ClassVar[int] = 4
    RUNS: ClassVar[int] = 4
    """Runs per thread and round, each with its own seeded input."""
    ROUNDS: ClassVar[int] = 5
    TIMEOUT: ClassVar[float] = 120.0
    """Seconds before the threads count as hung (a deadlock fails the case, never hangs it)."""
    TOLERANCE: ClassVar[float] = 1e-6
    """Relative error allowed against the sequential result: a backend may reduce in another
    order from run to run; a race gives garbage, far above this."""

    def run(self, target: Backend) -> Verdict:
        if self.skip:
            return Verdict(Outcome.SKIPPED, self.skip)
        model = build_model(self.model, BATCHES[0])
        compiled = _compile(model, target)
        if isinstance(compiled, Verdict):
            return compiled
        feeds = [random_inputs(model, seed=self.seed + i) for i in range(self.THREADS * self.RUNS)]
        try:
            report = check_concurrent_runs(
                compiled.run,
                feeds,
                self.THREADS,
                rounds=self.ROUNDS,
                timeout=self.TIMEOUT,
                tolerance=self.TOLERANCE,
            )
        except Exception as err:  # the sequential runs themselves failed
            return Verdict(Outcome.FAILED, f"crashed while running: {one_line(err)}")
        return PASS if report.ok else Verdict(Outcome.FAILED, report.summary())


def generate(slow: bool = False) -> list[Case]:
    """One case per model and batch size; slow models are skipped, with the reason, unless asked,
    and every model without onnxruntime (the oracle)."""
    no_oracle = NO_ORACLE if not has_onnxruntime() else ""
    cases: list[Case] = []
    for name in MODELS:
        why_slow = slow_reason(name)
        skip = "" if slow else why_slow
        for batch in BATCHES[:1] if why_slow else BATCHES:
            cases.append(ModelCase(f"{MODEL_PREFIX}{name}[b{batch}]", name, name, batch, no_oracle or skip))
    cases.append(ThreadsCase(f"{MODEL_PREFIX}mlp[threads]", "mlp", "mlp", no_oracle))
    return cases
