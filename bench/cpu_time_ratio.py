"""glow-cpu against onnxruntime on a zoo model, one thread, timed by the thread's CPU time.

On a shared machine with more runnable processes than cores, wall-clock medians include the
time a run spends preempted, which grows with the run's length (a batch-8 run of BERT-mini
is preempted more often than a batch-1 run) and differs from one run to the next. The CPU
time of the calling thread (both engines compute on it with one thread) leaves that out;
the effect of neighbours on the caches remains, so the ratio of the two engines, timed in
turn in one process, is still the figure to read. Time either engine spends off the calling
thread, or blocked, is not counted: the wall columns are printed beside it to compare (on
a tiny model, the MLP, onnxruntime's wall time exceeded its CPU time by 45%).

    .venv/bin/python bench/cpu_time_ratio.py bert_mini --batches 1 8 --runs 15
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np


def median_ms(engines: dict[str, Callable[[], object]], runs: int) -> dict[str, tuple[float, float]]:
    """(median thread-CPU ms, median wall ms) per engine over ``runs`` calls taken in turn,
    after two warm-up calls each."""
    for fn in engines.values():
        fn()
        fn()
    cpu: dict[str, list[float]] = {k: [] for k in engines}
    wall: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(runs):
        for key, fn in engines.items():
            w0, c0 = time.perf_counter(), time.thread_time()
            fn()
            cpu[key].append((time.thread_time() - c0) * 1e3)
            wall[key].append((time.perf_counter() - w0) * 1e3)
    return {k: (float(np.median(cpu[k])), float(np.median(wall[k]))) for k in engines}


def compare(name: str, batch: int, runs: int) -> str:
    """One line: both engines' CPU and wall medians on zoo model ``name`` at ``batch``, their
    ratios, and glow's largest error relative to onnxruntime's largest output."""
    import onnxruntime as ort

    import glow_core
    from glow_core import model_zoo

    model = model_zoo.MODELS[name](batch)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    feeds = {model.graph.input[0].name: x}
    compiled = glow_core.compile(model, backend="cpu", options={"threads": 1})
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    got = next(iter(compiled.run(feeds).values()))
    want = session.run(None, feeds)[0]
    error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    times = median_ms({"glow": lambda: compiled.run(feeds), "ort": lambda: session.run(None, feeds)}, runs)
    (glow_cpu, glow_wall), (ort_cpu, ort_wall) = times["glow"], times["ort"]
    return (
        f"{name} b{batch}: CPU ms glow {glow_cpu:.2f} ort {ort_cpu:.2f} glow/ort {glow_cpu / ort_cpu:.3f}"
        f" | wall ms glow {glow_wall:.2f} ort {ort_wall:.2f} glow/ort {glow_wall / ort_wall:.3f}"
        f" | max error relative to the largest output {error:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batches", type=int, nargs="+", default=[1])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for batch in args.batches:
        print(compare(args.model, batch, args.runs), flush=True)


if __name__ == "__main__":
    main()
