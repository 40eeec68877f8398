"""``profile``: run a float model over calibration inputs, recording every float value.

The recorded values are extra results of the function (a Save per value), so any backend
that runs the model runs its profiling too; no recording primitive is needed. The values
are those of the optimized graph (``profiled_values``), the graph the quantize pass sees,
so the names match whenever the same model is compiled with the same input shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from glow_core.passes import DEFAULT_GRAPH_PIPELINE, run_pipeline
from glow_core.quantization.convert import profiled_values
from glow_core.quantization.profile import Profile, ProfileError, TensorProfile

if TYPE_CHECKING:
    from glow_core.backend import Backend
    from glow_core.runtime.pipeline import ModelLike

RESULT_PREFIX = "profile:"
"""Output placeholders of recorded values are named ``profile:<value name>``."""


def profile(
    model: ModelLike,
    inputs: Iterable[Mapping[str, np.ndarray]],
    backend: str | Backend | None = "interpreter",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Profile:
    """The profile of ``model`` over the calibration batches ``inputs`` (each a dict of
    input name -> array, as ``CompiledFunction.run`` takes), run on ``backend``."""
    from glow_core.runtime.pipeline import compile, load_model

    module = load_model(model, input_shapes).clone()
    fn = module.function
    run_pipeline(fn, DEFAULT_GRAPH_PIPELINE)
    values = profiled_values(fn)
    results = {}
    for name, value in values.items():
        results[fn.save(value, f"{RESULT_PREFIX}{name}").name] = name
    compiled = compile(module, backend)
    result = Profile({name: TensorProfile() for name in values})
    for batch in inputs:
        outputs = compiled.run(batch)
        for output, name in results.items():
            result.tensors[name].record(outputs[output])
        result.batches += 1
    if result.batches == 0:
        raise ProfileError("no calibration inputs were given: pass at least one batch")
    return result
