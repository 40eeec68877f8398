"""A pool of worker processes: hands out recipes, sees crashes and hangs, restarts workers.

A worker that dies mid-case (a signal exit, or any exit) is a ``crash`` of that case; one that
says nothing for ``timeout_s`` seconds is killed and the case is a ``hang``. Either way the
case is charged to glow only if the worker was in glow's stage: a death inside onnxruntime or
``onnx.reference`` leaves glow's own outcome standing, with a note. Workers are long-lived
(importing glow and onnxruntime takes seconds) and replaced only when they die or stall.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from fuzz.spec import Recipe

REPO = Path(__file__).resolve().parent.parent
STARTUP_S = 120.0
"""How long a fresh worker may take to import glow, onnxruntime and onnx before it is ready."""

# One thread per worker (they run side by side) and few malloc arenas, so the address-space
# cap measures data, not per-thread reservations.
_WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
}


@dataclass
class Result:
    """What happened to one recipe: the outcome, the model it built, and the details."""

    recipe: Recipe
    outcome: str
    model: bytes = b""
    lines: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    note: str = ""
    seconds: float = 0.0

    @property
    def signature(self) -> tuple[str, str, str]:
        """What makes two failures the same: the outcome, the exception type and glow's site."""
        error = self.error or {}
        return (self.outcome, error.get("type", ""), error.get("site", ""))


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection
    ready: bool = False
    recipe: Recipe | None = None
    started: float = field(default_factory=time.monotonic)
    last_event: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)


class Supervisor:
    """``workers`` processes running cases on ``backend``, each capped at ``memory_mb``."""

    def __init__(
        self, backend: str = "interpreter", workers: int = 2, memory_mb: int = 3072, timeout_s: float = 30.0
    ):
        self.backend, self.count, self.memory_mb, self.timeout_s = backend, workers, memory_mb, timeout_s
        self._scratch = tempfile.TemporaryDirectory(prefix="glow-fuzz-")
        self._workers: list[_Worker] = []

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            self._stop(worker)
        self._workers = []
        self._scratch.cleanup()

    def run(
        self,
        recipes: Iterable[Recipe],
        deadline: float | None = None,
        on_result: Callable[[Result], None] | None = None,
    ) -> list[Result]:
        """Run every recipe (until ``deadline``, a ``time.monotonic()`` value); results in
        completion order."""
        pending: Iterator[Recipe] = iter(recipes)
        results: list[Result] = []
        exhausted = False

        def finish(result: Result) -> None:
            results.append(result)
            if on_result is not None:
                on_result(result)

        while len(self._workers) < self.count:
            self._workers.append(self._start())
        while True:
            if deadline is not None and time.monotonic() > deadline:
                exhausted = True
            for worker in self._workers:
                if worker.ready and worker.recipe is None and not exhausted:
                    recipe = next(pending, None)
                    if recipe is None:
                        exhausted = True
                        break
                    worker.recipe, worker.events = recipe, []
                    worker.started = worker.last_event = time.monotonic()
                    worker.conn.send({"recipe": recipe})
            busy = [w for w in self._workers if w.recipe is not None or not w.ready]
            if exhausted and not any(w.recipe is not None for w in self._workers):
                return results
            ready = wait([w.conn for w in busy], timeout=1.0)
            now = time.monotonic()
            for index, worker in enumerate(self._workers):
                if worker.conn in ready:
                    result = self._receive(worker)
                elif worker.ready and worker.recipe is None:
                    continue
                else:
                    limit = self.timeout_s if worker.ready else STARTUP_S
                    if now - worker.started <= limit:
                        continue
                    result = self._stalled(worker)
                if result is None and worker.recipe is not None and worker.process.poll() is not None:
                    result = self._case_of_dead(worker)
                if result is not None:
                    finish(result)
                if worker.process.poll() is not None or (
                    result is not None and result.outcome in ("crash", "hang")
                ):
                    self._stop(worker)
                    self._workers[index] = self._start()

    # ---- one worker ------------------------------------------------------------------------

    def _start(self) -> _Worker:
        parent, child = socket.socketpair()
        env = {
            **os.environ,
            **_WORKER_ENV,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "fuzz.worker", str(child.fileno()), str(self.memory_mb), self.backend],
            pass_fds=[child.fileno()],
            cwd=self._scratch.name,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        child.close()
        return _Worker(process, Connection(parent.detach()))

    def _stop(self, worker: _Worker) -> None:
        if worker.process.poll() is None:
            try:
                worker.conn.send(None)
                worker.process.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                worker.process.kill()
                worker.process.wait()
        worker.conn.close()

    def _receive(self, worker: _Worker) -> Result | None:
        """Read one event; a finished case, a dead worker's case, or None (more to come)."""
        try:
            event = worker.conn.recv()
        except (EOFError, OSError):
            code = worker.process.wait()
            if worker.recipe is None:
                raise RuntimeError(f"a fuzz worker died on start (exit status {code})") from None
            return self._lost(worker, "crash", _exit_reason(code))
        worker.last_event = time.monotonic()
        if event["event"] == "ready":
            worker.ready = True
            return None
        worker.events.append(event)
        if event["event"] != "done":
            return None
        return self._result(worker, event["outcome"], event.get("note", ""), event.get("error"))

    def _case_of_dead(self, worker: _Worker) -> Result:
        """The result of a case whose worker is found dead after one of its events was read:
        the events it sent before dying are read to the end (a case it finished is its own
        result, otherwise ``_receive`` reports it lost), so it is never dropped with the
        worker. A probe that segfaults right after its first events raced the read: on a
        loaded machine the worker was dead by then and its crash went unreported."""
        while True:
            result = self._receive(worker)
            if result is not None:
                return result

    def _stalled(self, worker: _Worker) -> Result | None:
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait()
        if worker.recipe is None:
            raise RuntimeError(f"a fuzz worker was not ready within {STARTUP_S:.0f} s")
        return self._lost(worker, "hang", f"no answer within {self.timeout_s:g} s")

    def _lost(self, worker: _Worker, outcome: str, why: str) -> Result:
        """The result of a case whose worker died or stalled: charged to glow only if glow was running."""
        stages = [e["stage"] for e in worker.events if e["event"] == "stage"]
        glow = next((e for e in worker.events if e["event"] == "glow"), None)
        if not stages:
            return self._result(worker, "fuzzer-error", f"{outcome} while building the case: {why}")
        if glow is None:
            return self._result(worker, outcome, f"{outcome} in glow: {why}")
        return self._result(worker, "unchecked", f"oracle {outcome}: {why}", glow.get("error"))

    def _result(self, worker: _Worker, outcome: str, note: str, error: dict | None = None) -> Result:
        case = next((e for e in worker.events if e["event"] == "case"), {})
        assert worker.recipe is not None
        result = Result(
            worker.recipe,
            outcome,
            case.get("model", b""),
            case.get("lines", []),
            error,
            note,
            time.monotonic() - worker.started,
        )
        worker.recipe, worker.events = None, []
        return result


def _exit_reason(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"
