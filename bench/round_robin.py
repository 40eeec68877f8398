"""Timing several engines on one input, round-robin in one process.

One run of each engine in turn, after one warm-up run each, and the median per engine: on a
shared machine a change of load hits every engine alike, so the ratios between them hold
even when the absolute times do not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def median_ms(engines: Mapping[str, Callable[[Any], Any]], x: Any, runs: int) -> dict[str, float]:
    """Median milliseconds of ``runs`` calls ``engine(x)`` per engine, taken in turn."""
    for fn in engines.values():
        fn(x)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(runs):
        for key, fn in engines.items():
            start = time.perf_counter()
            fn(x)
            times[key].append((time.perf_counter() - start) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}
