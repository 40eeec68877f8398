"""A backend's self-test: compile and run a trivial function, once per backend per process.

``BackendInfo.priority`` is what a plugin *claims*; picking the default backend on that
alone lets one broken plugin (one that supports nothing, or whose compiler is missing)
become the default of every ``compile(backend=None)`` and fail them all. The default is
therefore the highest-priority backend that passes this test: ``y = x + x`` on four
float32 values, compiled through the whole pipeline and compared with the exact answer.
"""

from __future__ import annotations

import threading

import numpy as np

from glow_core.backend import Backend
from glow_core.graph.function import Module

_RESULTS: dict[type[Backend], str | None] = {}
_LOCK = threading.Lock()


def self_test(backend: type[Backend]) -> str | None:
    """None if ``backend`` compiles and runs the trivial function correctly, else why not.

    The answer is kept for the process: the test costs a compilation, and a backend that
    was broken at the first try is not retried on every call.
    """
    with _LOCK:
        if backend not in _RESULTS:
            _RESULTS[backend] = _run(backend)
        return _RESULTS[backend]


def _trivial_module() -> Module:
    m = Module("glow_self_test")
    b = m.create_function().builder()
    x = b.placeholder("x", (4,))
    b.save(b.add(x, x), "y")
    return m


def _run(backend: type[Backend]) -> str | None:
    from glow_core.plugins import describe_error
    from glow_core.runtime.pipeline import compile

    x = np.array([1.0, -2.5, 3.25, 1e30], np.float32)
    try:
        compiled = compile(_trivial_module(), backend=backend())
        got = np.asarray(compiled.run({"x": x})["y"])
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # a plugin's SystemExit is its failure, not the process's
        return describe_error(err)
    if got.shape != x.shape or not np.array_equal(got, x + x):
        return f"y = x + x computed {got.tolist()} for x = {x.tolist()}"
    return None
