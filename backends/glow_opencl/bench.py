"""Latency of the zoo models on OpenCL, next to the interpreter and onnxruntime (not a test).

    .venv/bin/python backends/glow_opencl/bench.py [MODEL ...] [--runs N]

Median wall time of ``run()`` after three warm-up runs (inputs in, outputs out: the same work
for every column), with onnxruntime on 1 thread and on all cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import onnxruntime

import glow_core
from glow_core.model_zoo import MODELS, random_inputs


def median_ms(fn: Callable[[], object], runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _ort(model, threads: int):
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"{'model':22} {'opencl':>10} {'interpreter':>12} {'ort 1 thr':>10} {f'ort {cores} thr':>10}  (ms)")
    for name in args.models:
        model = MODELS[name]()
        inputs = random_inputs(model, seed=0)
        runs = max(3, args.runs // 4) if name == "resnet50" else args.runs
        cells = []
        for backend in ("opencl", "interpreter"):
            compiled = glow_core.compile(model, backend=backend)
            cells.append(median_ms(lambda c=compiled, x=inputs: c.run(x), runs))
        for threads in (1, cores):
            session = _ort(model, threads)
            cells.append(median_ms(lambda s=session, x=inputs: s.run(None, x), runs))
        widths = (10, 12, 10, 10)
        print(f"{name:22} " + " ".join(f"{c:>{w}.2f}" for c, w in zip(cells, widths, strict=True)))


if __name__ == "__main__":
    main()
