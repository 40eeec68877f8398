"""What ``glow bench`` measures: the latency of each run, its statistics, and peak memory.

Latency statistics follow the tools people compare with (onnxruntime_perf_test, trtexec):
min, median, p90, p99 and mean over the timed runs, after warm-up runs that are not
counted; throughput is inferences (runs x batch) per second of the timed loop's wall time.
Percentiles are nearest-rank: p99 of 50 runs is the slowest run but none, never a value
interpolated between runs that no run took.
"""

from __future__ import annotations

import math
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from glow_core import progress


@dataclass(frozen=True)
class Latencies:
    """Seconds of every timed run, and the wall time of the timed loop."""

    runs: tuple[float, ...]
    wall: float

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile ``q`` (0-100) of the run times."""
        ordered = sorted(self.runs)
        rank = max(1, math.ceil(q / 100 * len(ordered)))
        return ordered[rank - 1]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs)

    def throughput(self, batch: int) -> float:
        """Inferences per second over the timed loop."""
        return len(self.runs) * batch / self.wall


def time_runs(
    run: Callable[[], object], *, warmup: int, runs: int | None, seconds: float | None
) -> Latencies:
    """Call ``run`` ``warmup`` times untimed, then time it ``runs`` times, or for at least
    ``seconds`` (and at least one run). Progress goes to ``glow_core.progress``."""
    if (runs is None) == (seconds is None):
        raise ValueError("give exactly one of runs and seconds")
    for done in range(warmup):
        progress.advance(done, warmup, "warm-up runs")
        run()
    times: list[float] = []
    loop_start = time.perf_counter()
    while True:
        start = time.perf_counter()
        run()
        end = time.perf_counter()
        times.append(end - start)
        if runs is not None:
            progress.advance(len(times), runs, "runs")
            if len(times) >= runs:
                break
        else:
            assert seconds is not None
            progress.advance(min(int(end - loop_start), int(seconds)), math.ceil(seconds), "seconds")
            if end - loop_start >= seconds:
                break
    return Latencies(tuple(times), time.perf_counter() - loop_start)


_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


class PeakMemory:
    """The resident-set high-water mark of this process over a block of work.

    On Linux the mark is reset at the start (``/proc/self/clear_refs``) and read from
    ``VmHWM`` at the end, so it covers the block alone (plus what the process already held).
    Elsewhere only the process's lifetime peak (``getrusage``) is known: ``scoped`` says which.
    """

    def __init__(self) -> None:
        self.scoped = False
        self.peak_bytes = 0

    def __enter__(self) -> PeakMemory:
        try:
            _CLEAR_REFS.write_text("5")  # 5: reset the peak RSS to the current RSS
            self.scoped = _read_hwm() is not None
        except OSError:
            self.scoped = False
        return self

    def __exit__(self, *exc: object) -> None:
        hwm = _read_hwm() if self.scoped else None
        self.peak_bytes = hwm if hwm is not None else _lifetime_peak()


def _read_hwm() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _lifetime_peak() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux
