"""Single convolution layers with the register tiles of each vector register file, beside
onnxruntime: what sizing the tiles from the target's file (glow_cpu/registers.py) gains.

Each variant compiles into a cache folder of its own (the compile cache keys on the target,
not on a forced register file). Median wall time of 15 runs after one warm-up, one thread,
all engines in this one process.

    .venv/bin/python bench/register_tiles.py
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
LAYERS = (1, 3, 4, 5, 6, 7, 9, 11)  # indices into bench_layers.LAYERS
RUNS = 15


def main() -> None:
    import bench_layers
    import glow_cpu.backend as cpu_backend
    import onnxruntime as ort
    from bench_models import _median_ms  # one warm-up, then the median
    from glow_cpu.registers import AVX2, AVX512

    import glow_core
    from glow_core.model_zoo import random_inputs

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    print("| layer | AVX-512 tiles ms | AVX2 tiles ms | onnxruntime ms | AVX2 tiles / ort |")
    print("|---|--:|--:|--:|--:|")
    for index in LAYERS:
        layer = bench_layers.LAYERS[index]
        model, _ = bench_layers.conv_layer(*layer)
        feeds = random_inputs(model, seed=0)
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)[0]
        times = {}
        for name, registers in (("avx512", AVX512), ("avx2", AVX2)):
            cpu_backend.register_file = lambda *target, registers=registers: registers
            os.environ["GLOW_CPU_CACHE_DIR"] = tempfile.mkdtemp()
            compiled = glow_core.compile(model, backend="cpu", options={"threads": 1})
            got = next(iter(compiled.run(feeds).values()))
            assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want)), name
            times[name] = _median_ms(lambda compiled=compiled, feeds=feeds: compiled.run(feeds), 1, RUNS)
        times["ort"] = _median_ms(lambda session=session, feeds=feeds: session.run(None, feeds), 1, RUNS)
        print(
            f"| {layer} | {times['avx512']:.2f} | {times['avx2']:.2f} | {times['ort']:.2f} | "
            f"{times['avx2'] / times['ort']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
