"""Checking one operator on one backend: a one-node function, compiled and run on fresh inputs.

The oracle is the operator's own declaration: a primitive's ``reference`` (float64), or for a
high-level node a backend keeps, its lowering run with the primitives' references
(``glow_core.lowering.evaluate``). The oracle runs *before* the backend, under numpy's
divide/invalid traps, so a sample outside the reference's domain (a zero divisor) is drawn
again instead of reaching a device where integer division by zero kills the process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import glow_core
from glow_conformance.case import one_line
from glow_conformance.compare import check_result
from glow_conformance.input_classes import (
    CLASSES_BY_NAME,
    InputClass,
    first_operand_only,
    zero_sign_checked,
)
from glow_conformance.results import Outcome, Verdict
from glow_core.backend import Backend
from glow_core.errors import GlowError
from glow_core.graph import Module
from glow_core.lowering.evaluate import evaluate
from glow_core.spec import OpSpec, spec_of
from glow_core.types import Type

OUTPUT = "out"
SAMPLE_TRIES = 4
"""Draws of inputs before a case whose reference keeps failing is reported as an error."""


def input_name(index: int) -> str:
    return f"in{index}"


def build(kind: str, types: Sequence[Type], attrs: dict[str, Any]) -> Module:
    """A module whose one function computes ``kind`` on placeholders ``in0, in1, ...``."""
    module = Module(f"conformance_{kind}")
    b = module.create_function("main").builder()
    operands = [b.placeholder(input_name(i), t.shape, t.elem) for i, t in enumerate(types)]
    b.save(b.create(kind, *operands, **attrs), OUTPUT)
    return module


def _oracle(spec: OpSpec, module: Module, arrays: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    if spec.is_primitive:
        return np.asarray(spec.evaluate(arrays, attrs))
    feeds = {input_name(i): a for i, a in enumerate(arrays)}
    return evaluate(module, feeds)[OUTPUT]


def plant(
    input_class: InputClass | None,
    rng: np.random.Generator,
    arrays: list[np.ndarray],
    types: Sequence[Type],
    first_only: bool = False,
) -> list[np.ndarray]:
    """The sample with ``input_class``'s values planted in every operand the class applies
    to, or only in the first such operand (``input_classes.first_operand_only``)."""
    if input_class is None:
        return arrays
    planted, done = [], False
    for array, t in zip(arrays, types, strict=True):
        if input_class.applies(t.elem) and not done:
            array = input_class.plant(rng, array, t.elem)
            done = first_only
        planted.append(array)
    return planted


def _traps(result: Type, input_class: InputClass | None) -> dict[str, str]:
    """numpy's floating-point traps while the oracle runs: a float result of special inputs
    is whatever IEEE 754 says (NaN, inf), so nothing traps; otherwise division by zero and
    invalid operations (NaN cast to an integer) mean the draw left the reference's domain,
    and so does an integer division that overflows (the minimum by -1: a trap on a CPU)."""
    if result.elem.is_float:
        if input_class is not None:
            return {"all": "ignore"}
        return {"divide": "raise", "invalid": "raise"}
    return {"divide": "raise", "invalid": "raise", "over": "raise"}


def sample(
    spec: OpSpec,
    module: Module,
    types: Sequence[Type],
    attrs: dict[str, Any],
    rng: np.random.Generator,
    input_class: InputClass | None = None,
) -> tuple[list[np.ndarray], np.ndarray] | Verdict:
    """Inputs and the oracle's answer for them, or an error Verdict when no draw is valid."""
    problem = ""
    traps = _traps(spec.infer_type(list(types), attrs), input_class)
    first_only = input_class is not None and first_operand_only(input_class, spec.name, spec.is_primitive)
    for _ in range(SAMPLE_TRIES):
        try:
            drawn = spec.sample_inputs(rng, list(types), attrs)
            first_only = input_class is not None and first_operand_only(
                input_class, spec.name, spec.is_primitive
            )
            arrays = plant(input_class, rng, drawn, types, first_only)
            with np.errstate(**traps):
                return arrays, _oracle(spec, module, arrays, attrs)
        except FloatingPointError as err:
            problem = str(err)
        except Exception as err:  # a bug in the declaration, not in the backend under test
            return Verdict(Outcome.ERROR, f"{spec.name}'s sample or reference raised {one_line(err)}")
    return Verdict(
        Outcome.ERROR,
        f"{SAMPLE_TRIES} draws of {spec.name}'s sample gave inputs its reference cannot evaluate "
        f"({problem}); the declaration needs a `sample` that stays in the domain",
    )


def check_op(
    backend: Backend,
    kind: str,
    types: Sequence[Type],
    attrs: dict[str, Any],
    seed: int,
    input_class: str | None = None,
) -> Verdict:
    """Compile ``kind`` for ``backend``, run it on seeded random inputs (with the values of
    ``input_class`` planted, when named), compare with the oracle."""
    spec = spec_of(kind)
    full = spec.complete_attrs(attrs)
    result = spec.infer_type(list(types), full)
    module = build(kind, types, attrs)
    special = CLASSES_BY_NAME[input_class] if input_class else None
    drawn = sample(spec, module, types, full, np.random.default_rng(seed), special)
    if isinstance(drawn, Verdict):
        return drawn
    arrays, expected = drawn
    try:
        compiled = glow_core.compile(module, backend=backend)
    except GlowError as err:
        return Verdict(Outcome.FAILED, f"refused at compile time although claimed: {one_line(err)}")
    except Exception as err:
        return Verdict(Outcome.FAILED, f"crashed while compiling: {one_line(err)}")
    try:
        outputs = compiled.run({input_name(i): a for i, a in enumerate(arrays)})
    except Exception as err:
        return Verdict(Outcome.FAILED, f"crashed while running: {one_line(err)}")
    if OUTPUT not in outputs:
        return Verdict(Outcome.FAILED, f"returned outputs {sorted(outputs)}, not {OUTPUT!r}")
    return check_result(outputs[OUTPUT], expected, result, zero_sign_checked(kind, spec.is_primitive))
