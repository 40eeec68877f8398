"""glow-cpu against onnxruntime on a zoo model, one thread, timed by the thread's CPU time.

On a shared machine with more runnable processes than cores, wall-clock medians include the
time a run spends preempted, which grows with the run's length (a batch-8 run of BERT-mini
is preempted more often than a batch-1 run) and differs from one run to the next. The CPU
time of the calling thread (both engines compute on it with one thread) leaves that out;
the effect of neighbours on the caches remains, so the ratio of the two engines, timed in
turn in one process, is still the figure to read. Time either engine spends off the calling
thread, or blocked, is not counted: the wall columns are printed beside it to compare (on
a tiny model, the MLP, onnxruntime's wall time exceeded its CPU time by 45%). Both come from
``round_robin.median_ms`` (engines in a shuffled order each round), the CPU-time rounds first,
then as many wall-time rounds.

    .venv/bin/python bench/cpu_time_ratio.py bert_mini --batches 1 8 --runs 15
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from model_ab import ort_session
from round_robin import median_ms


def compare(name: str, batch: int, runs: int) -> str:
    """One line: both engines' CPU and wall medians on zoo model ``name`` at ``batch``, their
    ratios, and glow's largest error relative to onnxruntime's largest output."""
    import glow_core
    from glow_core import model_zoo

    model = model_zoo.MODELS[name](batch)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    feeds = {model.graph.input[0].name: x}
    compiled = glow_core.compile(model, backend="cpu", options={"threads": 1})
    session = ort_session(model)
    got = next(iter(compiled.run(feeds).values()))
    want = session.run(None, feeds)[0]
    error = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    engines = {"glow": compiled.run, "ort": lambda x: session.run(None, x)}
    cpu = median_ms(engines, feeds, runs, time.thread_time)
    wall = median_ms(engines, feeds, runs, time.perf_counter)
    columns = [
        f"{clock} ms glow {ms['glow']:.2f} ort {ms['ort']:.2f} glow/ort {ms['glow'] / ms['ort']:.3f}"
        for clock, ms in (("CPU", cpu), ("wall", wall))
    ]
    columns.append(f"max error relative to the largest output {error:.1e}")
    return f"{name} b{batch}: " + " | ".join(columns)


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
