"""The int8 kernels' tests' shared check: a compiled layer bit-equal to the interpreter's
integer reference on two inputs in turn."""

from __future__ import annotations

import numpy as np
from glow_conformance.quantized_models import SOURCE_KINDS

import glow_core
from glow_core import Module


def equal_to_the_reference_twice(
    rng: np.random.Generator, m: Module, inputs: dict[str, np.ndarray], source: str, options: dict
) -> list[np.ndarray]:
    """Compile ``m`` on the interpreter and on cpu (``options``), run both on ``inputs`` and
    then on a second full-range input of kind ``source`` for the same function, and assert
    the outputs equal bit for bit each time: an output the kernel skipped would keep the
    first run's value (integer outputs have no NaN poison to show it). Returns the
    reference's outputs of both runs (for the callers' saturation checks)."""
    reference = glow_core.compile(m, "interpreter")
    compiled = glow_core.compile(m, "cpu", options=options)
    _, dtype = SOURCE_KINDS[source]
    info = np.iinfo(dtype)
    shape = inputs["x"].shape
    outputs = []
    for run in range(2):
        if run:
            inputs = {"x": rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)}
        expected = reference.run(inputs)["out"]
        got = compiled.run(inputs)["out"]
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        outputs.append(expected)
    return outputs
