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
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from glow_conformance.results import CaseResult, Outcome, Verdict
from glow_conformance.runner import settle
from glow_core.backend import Backend
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
    """One worker process and the connection to it."""

    def __init__(self, backend: Backend):
        try:
            payload = pickle.dumps(backend)
        except Exception as err:
            raise GlowError(
                f"cannot hand backend {type(backend).__qualname__} to a worker process ({err}): "
                "define its class at module level, or run with --in-process (isolate=False)"
            ) from None
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

    def ask(self, case: object, timeout: float) -> tuple[Verdict, float]:
        """The case's verdict and seconds, or the verdict of a worker that died or ran out of time."""
        start = time.perf_counter()
        try:
            self.conn.send(case)
        except OSError:  # it died after its last answer (a crash in a kernel's cleanup)
            return Verdict(Outcome.CRASHED, f"the process to run it had died ({self.stop(kill=False)})"), 0.0
        if not self.conn.poll(timeout):
            self.stop(kill=True)
            return Verdict(Outcome.TIMEOUT, f"still running after {timeout:g} s: stopped"), timeout
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


def run_isolated(plan: Plan, timeout: float = DEFAULT_TIMEOUT) -> Iterator[CaseResult]:
    """Each case of ``plan`` in a worker process, in order, as results come."""
    worker: _Worker | None = None
    try:
        for case in plan.cases:
            if worker is None:
                worker = _Worker(plan.backend)
            verdict, seconds = worker.ask(case, timeout)
            if verdict.outcome in (Outcome.CRASHED, Outcome.TIMEOUT):
                worker = None  # gone: the next case gets a new one
            yield settle(case, verdict, seconds, plan.xfails)
    finally:
        if worker is not None:
            worker.stop(kill=False)


def run_in_process(plan: Plan) -> Iterator[CaseResult]:
    """Each case of ``plan`` in this process: no time limit (nothing could stop it), and a
    crash ends the run; for debugging a kernel in one process."""
    for case in plan.cases:
        yield plan.run(case)
