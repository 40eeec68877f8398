"""Concurrent runs of one compiled function: every result must equal the sequential one.

glow's threading contract (docs/architecture.md, "Threads") says a CompiledFunction and a
Session may be called from many threads at once. A backend that breaks it rarely crashes: two
runs share an arena and one run's outputs come back with the other's numbers in them, or the
native code deadlocks. So the check is by value, run by run: every input is run once alone
first, then all of them again from ``threads`` threads at once, and each concurrent result is
compared with the sequential result of the same input. A run that has not returned within
``timeout`` seconds counts as hung (its thread is abandoned, as daemon, so a deadlock fails
the check instead of hanging the caller).

Races between Python threads happen where the GIL changes hands, every 5 ms by default:
often longer than a whole run of a small model, so a shared-state bug could hide. The
concurrent phase runs with a switch interval of ``SWITCH_INTERVAL`` instead, so threads
interleave inside runs (between any two enqueued commands, say), as they would on a busy
server.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from glow_core.accuracy import max_relative_error

Feeds = Mapping[str, np.ndarray]
Run = Callable[[Feeds], Mapping[str, np.ndarray]]

SHOWN = 3
"""Mismatches and errors a report names one by one (the rest are counted)."""
SWITCH_INTERVAL = 1e-5
"""Seconds between GIL hand-overs during the concurrent phase (Python's default: 5e-3)."""


@dataclass
class ConcurrencyReport:
    """What ``check_concurrent_runs`` saw: runs, wrong results, errors and hung threads."""

    threads: int
    runs: int
    done: int = 0
    """Runs that returned (the rest raised, or were still running at the timeout)."""
    wrong: int = 0
    errors: int = 0
    hung: int = 0
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time of the concurrent phase."""

    @property
    def ok(self) -> bool:
        return not (self.wrong or self.errors or self.hung)

    def summary(self) -> str:
        head = (
            f"{self.threads} threads x {self.runs // max(self.threads, 1)} runs: "
            f"{self.done - self.wrong} of {self.runs} equal the sequential result"
        )
        extra = []
        if self.wrong:
            extra.append(f"{self.wrong} wrong")
        if self.errors:
            extra.append(f"{self.errors} raised")
        if self.hung:
            extra.append(
                f"{self.runs - self.done - self.errors} never returned: {self.hung} threads still "
                "running after the timeout (deadlock?)"
            )
        return head + (f" ({', '.join(extra)})" if extra else "") + "".join(f"; {d}" for d in self.details)


def check_concurrent_runs(
    run: Run,
    feeds: Sequence[Feeds],
    threads: int,
    *,
    rounds: int = 1,
    timeout: float = 60.0,
    tolerance: float = 0.0,
    expected: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> ConcurrencyReport:
    """Run every feed alone, then all of them ``rounds`` times from ``threads`` threads (feed
    ``i`` on thread ``i % threads``), and compare each concurrent result with the sequential
    one. Each round starts all threads at once (the moment runs collide most); more rounds
    cost no more sequential runs: cheap extra chances for a race to show.

    ``tolerance`` 0 asks for bitwise-equal outputs (a deterministic backend gives them: the
    same code on the same input); above 0 it is the largest ``max_relative_error`` allowed,
    for a backend whose reductions may run in another order from one run to the next.
    ``expected`` gives the sequential results instead (from another instance of the same
    model), so that the concurrent phase is the first use of ``run``: a Session then
    compiles its specializations while several threads ask for them.
    """
    if expected is None:
        expected = [dict(run(f)) for f in feeds]
    report = ConcurrencyReport(threads, len(feeds) * rounds)
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def note(kind: str, text: str) -> None:
        with lock:
            setattr(report, kind, getattr(report, kind) + 1)
            if len(report.details) < SHOWN:
                report.details.append(text)

    def worker(first: int) -> None:
        for _ in range(rounds):
            try:  # every round starts on all threads at once: that is when runs collide most
                start.wait(timeout)
            except threading.BrokenBarrierError:  # another thread hung: it is counted as such
                return
            run_share(range(first, len(feeds), threads))

    def run_share(indices: range) -> None:
        for index in indices:
            try:
                got = run(feeds[index])
            except Exception as err:  # any failure of a run is a finding, not a crash of the check
                note("errors", f"run {index} raised {type(err).__name__}: {err}")
                continue
            with lock:
                report.done += 1
            problem = _difference(expected[index], got, tolerance)
            if problem:
                note("wrong", f"run {index}: {problem}")

    began = time.perf_counter()
    default_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
        for thread in pool:
            thread.start()
        deadline = time.monotonic() + timeout
        for thread in pool:
            thread.join(max(deadline - time.monotonic(), 0.0))
    finally:
        sys.setswitchinterval(default_interval)
    report.seconds = time.perf_counter() - began
    report.hung = sum(thread.is_alive() for thread in pool)
    return report


def _difference(expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], tolerance: float) -> str:
    """Why ``got`` is not ``expected`` (empty when it is)."""
    if set(got) != set(expected):
        return f"outputs {sorted(got)} instead of {sorted(expected)}"
    for name, want in expected.items():
        have = np.asarray(got[name])
        if have.shape != want.shape or have.dtype != want.dtype:
            return f"output {name!r} is {have.dtype}{list(have.shape)}, not {want.dtype}{list(want.shape)}"
        if want.dtype.kind == "O":  # strings (a Session's host outputs): by value
            if not np.array_equal(have, want):
                return f"output {name!r} differs from the sequential result"
        elif tolerance == 0.0:
            if have.tobytes() != want.tobytes():
                wrong = np.frombuffer(have.tobytes(), np.uint8) != np.frombuffer(want.tobytes(), np.uint8)
                return f"output {name!r} differs from the sequential result in {int(wrong.sum())} bytes"
        else:
            error = max_relative_error({name: have}, {name: want})
            if not error <= tolerance:
                return f"output {name!r} has relative error {error:.3g} (tolerance {tolerance:g})"
    return ""
