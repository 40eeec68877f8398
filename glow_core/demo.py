"""The demo: compile a small CNN on the best installed backend and check it against onnxruntime."""

from __future__ import annotations

import time

import numpy as np

from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo import random_inputs, small_cnn
from glow_core.plugins import get_backend
from glow_core.runtime.pipeline import compile_stages, load_model

TOLERANCE = 1e-4


def main(backend_name: str | None = None) -> int:
    """Print what was compiled, where, how well it agrees; 0 when within tolerance."""
    model = small_cnn(batch=2, seed=7)
    backend = get_backend(backend_name)
    info = backend.info()
    print(f"backend: {info.name} {info.version} ({info.device}), {len(info.supports)} primitives")
    start = time.perf_counter()
    module = load_model(model)
    stages = compile_stages(module, backend)
    compiled = backend.compile(stages.ir, backend.parse_options(None))
    compile_ms = (time.perf_counter() - start) * 1e3
    counts = stages.node_counts
    print(
        f"compiled small_cnn in {compile_ms:.0f} ms: {counts['graph']} nodes imported, "
        f"{counts['lowered']} after lowering and optimization, {len(stages.ir.instrs)} instructions"
    )
    print(f"memory: {stages.plan.summary()}")
    inputs = random_inputs(model, seed=int(np.random.default_rng().integers(1 << 31)))
    outputs = compiled.run(inputs)
    error = max_relative_error(outputs, onnxruntime_outputs(model, inputs))
    ok = error < TOLERANCE
    print(
        f"output {outputs['output'].shape}: max relative error vs onnxruntime "
        f"{error:.2e} ({'OK' if ok else 'MISMATCH'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
