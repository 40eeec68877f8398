"""Concurrent runs at scale: many threads calling one compiled function, and what they gain.

    .venv/bin/python bench/threads.py [--threads 8] [--runs 50] [--models resnet_bottleneck,bert_mini]
                                      [--targets interpreter,cpu-threads1,cpu-threads2,opencl]

Part 1, correctness (the "done means" of the threading issue): for every model and target,
``threads`` Python threads each make ``runs`` runs of one compiled function, every run with
its own seeded input, and every result is compared bitwise with the sequential result of
the same input (``glow_conformance.threads.check_concurrent_runs``). A target whose plugin
or device is missing is reported and skipped.

Part 2, throughput: runs per second of one glow-cpu function called from 1 and from 2 Python
threads, for a function compiled with ``threads=1`` (its runs overlap: one state each) and
with ``threads=2`` (its runs take turns: the worker pool is one per function). Wall-clock
figures on a shared machine are an indication, not a benchmark.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from glow_conformance.threads import check_concurrent_runs

import glow_core
from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS, random_inputs

TARGETS = {
    "interpreter": ("interpreter", {}),
    "cpu-threads1": ("cpu", {"threads": 1}),
    "cpu-threads2": ("cpu", {"threads": 2}),
    "opencl": ("opencl", {}),
}


def correctness(models: list[str], targets: list[str], threads: int, runs: int) -> bool:
    """Print one row per model and target; True when every concurrent result was right."""
    print("| model | target | runs overlap | runs | equal to sequential | wrong | raised | hung | s |")
    print("|---|---|---|--:|--:|--:|--:|--:|--:|")
    all_ok = True
    for name in models:
        model = MODELS[name]()
        feeds = [random_inputs(model, seed=seed) for seed in range(threads * runs)]
        for target in targets:
            backend, options = TARGETS[target]
            try:
                compiled = glow_core.compile(model, backend=backend, options=options)
            except GlowError as err:
                print(f"| {name} | {target} | skipped: {str(err).splitlines()[0][:120]} ||||||||")
                continue
            report = check_concurrent_runs(compiled.run, feeds, threads, timeout=1800)
            all_ok &= report.ok
            print(
                f"| {name} | {target} | {compiled.concurrent_runs} | {report.runs} "
                f"| {report.done - report.wrong} | {report.wrong} "
                f"| {report.errors} | {report.hung} | {report.seconds:.1f} |",
                flush=True,
            )
    return all_ok


def throughput(model_name: str, seconds: float) -> None:
    """Runs per second of a cpu function from 1 and 2 Python threads."""
    model = MODELS[model_name]()
    feeds = [random_inputs(model, seed=seed) for seed in range(4)]
    print(f"\n{model_name}: glow-cpu runs/s from 1 and 2 Python threads ({seconds:.0f} s each)\n")
    print("| function | runs overlap | 1 Python thread | 2 Python threads | ratio |")
    print("|---|---|--:|--:|--:|")
    for code_threads in (1, 2):
        compiled = glow_core.compile(model, backend="cpu", options={"threads": code_threads})
        compiled.run(feeds[0])  # warm up (workers started, pages touched)
        rates = [_rate(compiled.run, feeds, callers, seconds) for callers in (1, 2)]
        print(
            f"| threads={code_threads} | {compiled.concurrent_runs} | {rates[0]:.1f} | {rates[1]:.1f} "
            f"| {rates[1] / rates[0]:.2f} |",
            flush=True,
        )


def _rate(run, feeds: list[dict[str, np.ndarray]], callers: int, seconds: float) -> float:
    """Runs per second that ``callers`` threads complete together in about ``seconds``."""
    counts = [0] * callers
    stop = time.perf_counter() + seconds
    start = threading.Barrier(callers)

    def caller(index: int) -> None:
        start.wait()
        while time.perf_counter() < stop:
            run(feeds[counts[index] % len(feeds)])
            counts[index] += 1

    began = time.perf_counter()
    pool = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(counts) / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50, help="runs per thread")
    parser.add_argument("--models", default="resnet_bottleneck,bert_mini")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--throughput-model", default="resnet_bottleneck")
    parser.add_argument("--seconds", type=float, default=10.0, help="per throughput figure")
    args = parser.parse_args()
    ok = correctness(args.models.split(","), args.targets.split(","), args.threads, args.runs)
    if args.seconds > 0:
        throughput(args.throughput_model, args.seconds)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
