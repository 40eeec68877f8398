"""The partitions layer: every model of the models layer split between the backend and the
reference interpreter, against onnxruntime.

A backend that passes the models layer alone can still break a partitioned run: its
partition's result is a boundary tensor another device reads, so an output it forgets, a
buffer it leaves untouched or a result it keeps from the previous run shows up only there.
Each model (at batch 1; slow ones with ``slow=True``) runs in two ways:

- ``partition:NAME[reference]``: on ``[BACKEND, interpreter]``, as a vendor runs it with a
  catch-all. A backend claiming a few primitives (a conv+matmul accelerator) runs what it
  declares and the interpreter the rest; one claiming everything gets one partition.
- ``partition:NAME[alternating]``: the same list with the schedule cut into ``STRETCHES``
  stretches taking turns between the backend and the interpreter (the partitioner's
  ``alternate`` option), so tensors cross in both directions whatever the backend claims.

Each case runs two different seeded inputs through one compiled function and compares both
with onnxruntime: a partition that returns the first run's result again passes a single run
and fails the second. Without onnxruntime the cases are skipped (the layer reads INCOMPLETE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from glow_conformance.case import PARTITION_PREFIX, Case, one_line
from glow_conformance.models_layer import (
    BATCHES,
    NO_ORACLE,
    TOLERANCE,
    build_model,
    has_onnxruntime,
    slow_reason,
)
from glow_conformance.results import PASS, Outcome, Verdict
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.backend import Backend
from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.plugins import get_backend
from glow_core.runtime.partitioned import PartitionedFunction, compile_partitioned
from glow_core.runtime.pipeline import load_model

REFERENCE = "interpreter"
"""The backend that runs what the checked backend does not (glow-interpreter, numpy)."""

STRETCHES = 6
"""Stretches of the alternating variant: at least six partitions, three on each device."""

RUNS = 2
"""Inputs per case, each compared with onnxruntime: the second catches results kept from the
first run."""

VARIANTS = {"reference": None, "alternating": STRETCHES}
"""Case variant -> the partitioner's ``alternate`` option."""


@dataclass(frozen=True, eq=False)
class PartitionCase(Case):
    """``partition:resnet50[alternating]``: one zoo model on ``[backend, interpreter]``."""

    model: str
    alternate: int | None
    skip: str = ""
    """Why the case is not run here (no onnxruntime; a slow model without ``slow=True``)."""
    layer: ClassVar[str] = "partitions"

    def run(self, target: Backend) -> Verdict:
        if self.skip:
            return Verdict(Outcome.SKIPPED, self.skip)
        try:
            reference = get_backend(REFERENCE)
        except GlowError as err:
            return Verdict(Outcome.SKIPPED, f"the reference backend is not installed: {one_line(err)}")
        model = build_model(self.model, BATCHES[0])
        try:
            compiled = compile_partitioned(load_model(model), [target, reference], alternate=self.alternate)
        except GlowError as err:
            return Verdict(Outcome.UNSUPPORTED, one_line(err))
        except Exception as err:
            return Verdict(Outcome.FAILED, f"crashed while compiling: {one_line(err)}")
        return _check_runs(model, compiled, self.seed)


def _check_runs(model, compiled: PartitionedFunction, seed: int) -> Verdict:
    """Run ``RUNS`` different inputs through ``compiled``; the first wrong one fails the case."""
    for run in range(RUNS):
        inputs = random_inputs(model, seed=seed + run)
        try:
            outputs = compiled.run(inputs)
        except Exception as err:
            return Verdict(Outcome.FAILED, f"run {run + 1} crashed: {one_line(err)} ({compiled.summary()})")
        error = max_relative_error(outputs, onnxruntime_outputs(model, inputs))
        if not error < TOLERANCE:
            again = " (the first run matched: a result kept from it?)" if run else ""
            return Verdict(
                Outcome.FAILED,
                f"run {run + 1} of {RUNS}: max relative error {error:.3g} vs onnxruntime "
                f"(tolerance {TOLERANCE:g}){again}; {compiled.summary()}",
            )
    return PASS


def generate(slow: bool = False) -> list[Case]:
    """Two cases per zoo model (the slow ones skipped unless asked; all without onnxruntime)."""
    no_oracle = NO_ORACLE if not has_onnxruntime() else ""
    cases: list[Case] = []
    for name in MODELS:
        skip = no_oracle or ("" if slow else slow_reason(name))
        for variant, alternate in VARIANTS.items():
            cases.append(PartitionCase(f"{PARTITION_PREFIX}{name}[{variant}]", name, name, alternate, skip))
    return cases
