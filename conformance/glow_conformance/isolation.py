"""Cases run in a worker process, so a kernel that crashes or hangs costs one case, not the run.

The worker is a fork of the process that planned the run: it inherits the plan (the cases,
the backend, the registry a test installed) without pickling anything, runs the cases the
parent hands it one at a time, and sends back each result. When the worker dies (a segfault
in a kernel, an ``os._exit``) the case it was running is recorded as ``crashed`` with the
signal or exit status; when a case runs past the time limit the worker is killed and the
case recorded as ``timeout``. Either way a fresh fork takes the next case and the run goes
on. Platforms without ``fork`` run the cases in-process (a crash then ends the run).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from glow_conformance.results import CaseResult, Outcome, Verdict
from glow_conformance.runner import settle

if TYPE_CHECKING:
    from glow_conformance.suite import Plan

DEFAULT_TIMEOUT = 300.0
"""Seconds one case may take (compile and run) before it is stopped; ResNet-50 on a numpy
backend takes well under a minute."""


def can_isolate() -> bool:
    """Whether this platform can fork a worker that inherits the plan."""
    return "fork" in multiprocessing.get_all_start_methods()


def _serve(plan: Plan, conn: Connection) -> None:
    """The worker's loop: run the case at each index received, send its result back."""
    while True:
        try:
            index = conn.recv()
        except EOFError:  # the parent is gone
            return
        if index is None:
            return
        conn.send(plan.run(plan.cases[index]).to_dict())


class _Worker:
    """One forked worker and the pipe to it."""

    def __init__(self, plan: Plan):
        context = multiprocessing.get_context("fork")
        self.conn, theirs = context.Pipe()
        self.process: Any = context.Process(target=_serve, args=(plan, theirs), daemon=True)
        self.process.start()
        theirs.close()

    def ask(self, index: int, timeout: float) -> dict[str, Any] | Verdict:
        """The result of case ``index``, or the verdict of a worker that died or ran out of time."""
        try:
            self.conn.send(index)
        except OSError:  # it died after its last answer (a crash in a kernel's cleanup)
            return Verdict(Outcome.CRASHED, f"the process to run it had died ({self.stop(kill=False)})")
        if not self.conn.poll(timeout):
            self.stop(kill=True)
            return Verdict(Outcome.TIMEOUT, f"still running after {timeout:g} s: stopped")
        try:
            return self.conn.recv()
        except EOFError:
            return Verdict(Outcome.CRASHED, f"the process running it died ({self.stop(kill=False)})")

    def stop(self, *, kill: bool) -> str:
        """End the worker; returns how it ended, in words."""
        if kill:
            self.process.kill()
        elif self.process.is_alive():
            with contextlib.suppress(OSError):  # it may die between the check and the send
                self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():  # ignored the request to stop
            self.process.kill()
            self.process.join()
        self.conn.close()
        return _describe_exit(self.process.exitcode)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def run_isolated(plan: Plan, timeout: float = DEFAULT_TIMEOUT) -> Iterator[CaseResult]:
    """Each case of ``plan`` in a forked worker, in order, as results come."""
    worker: _Worker | None = None
    try:
        for index, case in enumerate(plan.cases):
            if worker is None:
                worker = _Worker(plan)
            start = time.perf_counter()
            answer = worker.ask(index, timeout)
            if isinstance(answer, Verdict):  # the worker is gone: the next case gets a new one
                worker = None
                yield settle(case, answer, plan.xfails, time.perf_counter() - start)
            else:
                yield CaseResult.from_dict(answer)
    finally:
        if worker is not None:
            worker.stop(kill=False)


def run_in_process(plan: Plan) -> Iterator[CaseResult]:
    """Each case of ``plan`` in this process: no time limit (nothing could stop it), and a
    crash ends the run; for debugging a kernel in one process."""
    for case in plan.cases:
        yield plan.run(case)
