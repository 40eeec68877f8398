"""The worker process: builds and checks cases one after another, inside a memory cap.

Started by the supervisor as ``python -m fuzz.worker FD MEMORY_MB BACKEND`` with one end of a
socket pair on FD. Before importing anything heavy it caps its own address space
(``RLIMIT_AS``), so a memory bomb fails an allocation in this process instead of taking the
machine, and sends its own stdout and stderr to /dev/null (native libraries print; the
protocol never shares a stream with them).

Protocol (pickled dicts on the socket): the worker sends ``{"event": "ready"}``; then for each
``{"recipe": ...}`` it receives it sends ``case`` (the model's bytes and how it was made),
``stage`` marks, ``glow``, and finally ``done``. ``None`` asks it to exit. A recipe whose base
is ``{"kind": "probe", "action": ...}`` makes the worker misbehave on purpose (segfault,
hang, allocate, raise), which is how the tests prove the supervisor sees each failure.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time
from multiprocessing.connection import Connection
from typing import Any


def _cap_memory(megabytes: int) -> None:
    limit = megabytes * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _probe(action: str, megabytes: int) -> dict[str, Any]:
    """Misbehave as asked: the supervisor's tests use these to see each failure kind."""
    if action == "segfault":  # a real invalid read: libraries' handlers may swallow a sent SIGSEGV
        ctypes.string_at(0)
    if action == "hang":
        time.sleep(3600)
    if action == "allocate":  # twice the cap in 64 MB steps: fails only because of the cap
        held = []
        try:
            for _ in range(megabytes // 32):
                held.append(bytearray(64 << 20))
        except MemoryError:
            held.clear()
            return {
                "outcome": "raw-exception",
                "error": {"type": "MemoryError", "message": "probe", "site": "probe", "traceback": ""},
            }
    return {
        "outcome": "refused",
        "error": {"type": "GlowError", "message": "probe", "site": "probe", "traceback": ""},
    }


def serve(conn: Connection, backend: str, megabytes: int) -> None:
    """Answer recipes until told to stop."""
    import onnxruntime

    from fuzz import check, spec

    onnxruntime.set_default_logger_severity(4)
    conn.send({"event": "ready"})
    while (message := conn.recv()) is not None:
        recipe = message["recipe"]
        if recipe["base"]["kind"] == "probe":
            conn.send({"event": "case", "model": b"", "lines": ["probe"]})
            conn.send({"event": "stage", "stage": "glow"})
            result = _probe(recipe["base"]["action"], megabytes)
            conn.send({"event": "done", **result})
            continue
        try:
            model_bytes, lines = spec.build(recipe)
        except Exception as err:  # a fuzzer bug, reported as such
            conn.send(
                {"event": "done", "outcome": "fuzzer-error", "note": f"{type(err).__name__}: {err}"[:300]}
            )
            continue
        conn.send({"event": "case", "model": model_bytes, "lines": lines})
        result = check.check_case(model_bytes, backend, recipe["feeds"], conn.send)
        conn.send({"event": "done", **result})


def main(argv: list[str]) -> None:
    fd, megabytes, backend = int(argv[0]), int(argv[1]), argv[2]
    _cap_memory(megabytes)
    if os.environ.get("GLOW_FUZZ_WORKER_OUTPUT") != "1":
        _quiet()
    serve(Connection(fd), backend, megabytes)


if __name__ == "__main__":
    main(sys.argv[1:])
