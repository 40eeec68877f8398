"""Timing several engines on one input, round-robin in one process.

One run of each engine in turn, after warm-up runs, and the median per engine: on a shared
machine a change of load hits every engine alike, so the ratios between them hold even when
the absolute times do not.

The warm-up takes every engine in turn for at least ``WARM_UP_SECONDS``, not one run each:
numpy's OpenBLAS thread spins for about 0.1 s after a BLAS call and shares the cores with
whatever runs then (the compile made one until 2026-11-27; an engine or a bench may
still). A 128 -> 128 3x3 layer on 28x28 on 2 threads ran 1.2 ms for its first ~85 runs
after compiling, then 0.55 ms, and from the start with ``OPENBLAS_NUM_THREADS=1``
(2026-11-27, Intel Xeon, 2 vCPUs); ``bench/layer_scaling.py``, one warm-up run then 40
rounds, had measured such layers at 0.60-0.71x on two threads against one.

Each round takes the engines in a new order (shuffled, seeded). In a fixed order an engine
timed right after another that read the same input found it in cache: two identical
builds of one MobileNetV2 layer timed one after the other, the second ran 7-10% faster than
the first, for every layer (2026-11-26), which read as a gain of whatever change the second
build had.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

WARM_UP_SECONDS = 0.3


def _warm_up(engines: Mapping[str, Callable[[Any], Any]], x: Any) -> None:
    """Every engine in turn until ``WARM_UP_SECONDS`` have passed (each at least once)."""
    end = time.perf_counter() + WARM_UP_SECONDS
    while True:
        for fn in engines.values():
            fn(x)
        if time.perf_counter() >= end:
            return


def median_ms(
    engines: Mapping[str, Callable[[Any], Any]],
    x: Any,
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median milliseconds of ``runs`` calls ``engine(x)`` per engine, taken in turn, each
    round in its own order, by ``clock`` (wall time unless told).

    ``clock=time.thread_time`` counts the calling thread's CPU time instead: right for
    engines that run on the caller's thread alone (one thread: glow-cpu, onnxruntime), and on
    a machine shared with other jobs it leaves out the time the thread waited for a core.
    MobileNetV2 at batch 1, load average 10 on 2 cores, 60 runs: glow-cpu's wall times had
    an interquartile range of 5.3 ms around a 24.2 ms median, its CPU times 0.5 around 12.4."""
    _warm_up(engines, x)
    times: dict[str, list[float]] = {k: [] for k in engines}
    order = list(engines)
    shuffle = random.Random(0).shuffle
    for _ in range(runs):
        shuffle(order)
        for key in order:
            start = clock()
            engines[key](x)
            times[key].append((clock() - start) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def median_ms_in_blocks(
    engines: Mapping[str, Callable[[Any], Any]],
    x: Any,
    rounds: int,
    per_block: int = 10,
    untimed: int = 2,
) -> dict[str, float]:
    """Median milliseconds per engine of ``rounds`` blocks of ``per_block`` back-to-back
    calls, each block after ``untimed`` calls of its own, the engines' blocks in turn (the
    order reversed every other round).

    What a model running alone sees: its own data in cache from its last call and, with
    several threads, its workers still spinning. Single calls taken in turn (``median_ms``)
    each find the caches full of the other engines' data: on an Intel Xeon with 2 vCPUs
    (2026-11-28), ResNet-50 on glow-cpu's 2 threads ran 0.8-1.1 ms (3-4%) slower right
    after its 1-thread build's call than after its own, and 1.2-1.9 ms slower after 50 ms
    idle, whether or not its worker had slept."""
    _warm_up(engines, x)
    times: dict[str, list[float]] = {k: [] for k in engines}
    order = list(engines)
    for r in range(rounds):
        for key in order if r % 2 == 0 else order[::-1]:
            fn = engines[key]
            for _ in range(untimed):
                fn(x)
            for _ in range(per_block):
                start = time.perf_counter()
                fn(x)
                times[key].append((time.perf_counter() - start) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}
