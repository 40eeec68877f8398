"""Cases run in a worker process, so a kernel that crashes or hangs costs one case, not the run.

The worker is a fresh Python process (``python -m glow_conformance.worker``), never a fork:
a fork inherits the state of device runtimes the planning process has touched (PoCL's thread
pool, for one, is not there in a forked child, which then waits forever). The parent sends
it the backend object once (pickled: a plugin's backend class is importable by name), then
each case in turn; the worker runs it and answers with the verdict. The parent applies the
xfail declarations, so a result means the same as in-process.

When the worker dies (a segfault in a kernel, an ``os._exit``) the case it was running is
recorded as ``crashed`` with the signal or exit status; when a case runs past the time limit
the worker is killed and the case recorded as ``timeout``. Either way a fresh worker takes the
next case and the run goes on.

A run uses ``jobs`` workers at once (``glow conformance --jobs``; one per CPU by default),
each taking the next case as it finishes its own; results come back in the plan's order.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from glow_conformance.case import Case
from glow_conformance.results import CaseResult, Outcome, Verdict
from glow_conformance.runner import settle
from glow_core.backend import Backend
from glow_core.cpus import usable_cpus
from glow_core.errors import GlowError

if TYPE_CHECKING:
    from glow_conformance.suite import Plan

DEFAULT_TIMEOUT = 300.0
"""Seconds one case may take (compile and run) before it is stopped; ResNet-50 on a numpy
backend takes well under a minute."""

STARTUP_TIMEOUT = 300.0
"""Seconds a worker may take to import glow and the backend before its first case (not
counted in the case's time limit)."""

READY = "ready"


class _Worker:
    """One worker process and the connection to it.

    Starting is split in two (``__init__`` launches, ``wait_ready`` waits for the imports), so
    a pool launches all its workers before waiting for the first: their imports overlap."""

    def __init__(self, payload: bytes):
        ours, theirs = multiprocessing.Pipe()
        # The worker imports what this process can: test fakes and in-tree plugins included.
        path = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "glow_conformance.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env={**os.environ, "PYTHONPATH": path},
        )
        theirs.close()
        self.conn = ours
        self.conn.send_bytes(payload)

    def wait_ready(self) -> None:
        if not self.conn.poll(STARTUP_TIMEOUT) or self._receive() != READY:
            raise GlowError(
                f"the conformance worker did not start ({self.stop(kill=True)}; its error is above): "
                "run with --in-process to see it in this process"
            )

    def _receive(self) -> object:
        try:
            return self.conn.recv()
        except EOFError:
            return None

    def send(self, case: object) -> bool:
        """Hand the worker a case; False when it had died after its last answer (a crash in a
        kernel's cleanup)."""
        try:
            self.conn.send(case)
        except OSError:
            return False
        return True

    def answer(self, start: float) -> tuple[Verdict, float]:
        """The verdict and seconds of the case sent at ``start``, once the connection is
        readable: the worker's answer, or ``crashed`` when it died instead."""
        answer = self._receive()
        if answer is None:
            return (
                Verdict(Outcome.CRASHED, f"the process running it died ({self.stop(kill=False)})"),
                time.perf_counter() - start,
            )
        outcome, message, seconds = answer  # type: ignore[misc]
        return Verdict(Outcome(outcome), message), seconds

    def stop(self, *, kill: bool) -> str:
        """End the worker; returns how it ended, in words."""
        if kill:
            self.process.kill()
        else:
            with contextlib.suppress(OSError):  # it may be gone already
                self.conn.send(None)
        try:
            code = self.process.wait(10)
        except subprocess.TimeoutExpired:  # ignored the request to stop
            self.process.kill()
            code = self.process.wait()
        self.conn.close()
        return _describe_exit(code)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def default_jobs() -> int:
    """Workers a run uses by default: one per CPU this process may run on."""
    return usable_cpus()


def _payload(backend: Backend) -> bytes:
    try:
        return pickle.dumps(backend)
    except Exception as err:
        raise GlowError(
            f"cannot hand backend {type(backend).__qualname__} to a worker process ({err}): "
            "define its class at module level, or run with --in-process (isolate=False)"
        ) from None


@dataclass
class _Running:
    """A case a worker is running: where it sits in the plan, and its deadline."""

    index: int
    case: Case
    start: float
    deadline: float


class _Pool:
    """Up to ``jobs`` workers, each running one case at a time, replaced when one dies."""

    def __init__(self, payload: bytes, jobs: int):
        self.payload, self.jobs = payload, jobs
        self.idle: list[_Worker] = []
        self.running: dict[_Worker, _Running] = {}

    def start(self, count: int) -> None:
        """Bring the idle workers up to ``count`` (at most ``jobs`` in all), all launched
        before any is waited for."""
        wanted = min(count, self.jobs - len(self.running)) - len(self.idle)
        fresh = [_Worker(self.payload) for _ in range(max(0, wanted))]
        for worker in fresh:
            worker.wait_ready()
        self.idle += fresh

    def submit(self, index: int, case: Case, timeout: float) -> tuple[Verdict, float] | None:
        """Hand ``case`` to an idle worker; the verdict at once when the worker was found dead."""
        worker = self.idle.pop()
        now = time.perf_counter()
        if not worker.send(case):
            return Verdict(
                Outcome.CRASHED, f"the process to run it had died ({worker.stop(kill=False)})"
            ), 0.0
        self.running[worker] = _Running(index, case, now, now + timeout)
        return None

    def collect(self, timeout: float) -> list[tuple[_Running, Verdict, float]]:
        """Wait for the next answers (or deadlines); each finished case with its verdict."""
        now = time.perf_counter()
        wait_for = max(0.0, min(r.deadline for r in self.running.values()) - now)
        by_conn = {w.conn: w for w in self.running}
        ready = multiprocessing.connection.wait(list(by_conn), wait_for)
        finished = []
        for conn in ready:
            worker = by_conn[conn]  # type: ignore[index]
            running = self.running.pop(worker)
            verdict, seconds = worker.answer(running.start)
            if verdict.outcome is not Outcome.CRASHED:
                self.idle.append(worker)
            finished.append((running, verdict, seconds))
        now = time.perf_counter()
        for worker, running in list(self.running.items()):
            if running.deadline <= now and worker.conn not in ready:
                del self.running[worker]
                worker.stop(kill=True)
                finished.append(
                    (
                        running,
                        Verdict(Outcome.TIMEOUT, f"still running after {timeout:g} s: stopped"),
                        timeout,
                    )
                )
        return finished

    def close(self) -> None:
        for worker in self.idle:
            worker.stop(kill=False)
        for worker in self.running:
            worker.stop(kill=True)
        self.idle, self.running = [], {}


def run_isolated(plan: Plan, timeout: float = DEFAULT_TIMEOUT, jobs: int = 1) -> Iterator[CaseResult]:
    """Each case of ``plan`` in one of ``jobs`` worker processes, results in plan order as
    they come (a result waits for those of the cases before it)."""
    cases = plan.cases
    pool = _Pool(_payload(plan.backend), max(1, min(jobs, len(cases))))
    done: dict[int, CaseResult] = {}
    queued, emitted = 0, 0
    try:
        while emitted < len(cases):
            pool.start(len(cases) - queued)
            while queued < len(cases) and pool.idle:
                immediate = pool.submit(queued, cases[queued], timeout)
                if immediate is not None:
                    done[queued] = settle(cases[queued], *immediate, plan.xfails)
                queued += 1
            if pool.running:
                for running, verdict, seconds in pool.collect(timeout):
                    done[running.index] = settle(running.case, verdict, seconds, plan.xfails)
            while emitted in done:
                yield done.pop(emitted)
                emitted += 1
    finally:
        pool.close()


def run_in_process(plan: Plan) -> Iterator[CaseResult]:
    """Each case of ``plan`` in this process: no time limit (nothing could stop it), and a
    crash ends the run; for debugging a kernel in one process."""
    for case in plan.cases:
        yield plan.run(case)
