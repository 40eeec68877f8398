"""The worker process of an isolated conformance run (``isolation.py`` starts it).

Protocol, over the connection whose file descriptor is the one argument: receive the
pickled backend; answer ``ready``; then for each case received, run it and answer
``(outcome, message, seconds)``; ``None`` ends the process. The case's verdict is sent raw:
the parent applies the xfail declarations.
"""

from __future__ import annotations

import pickle
import sys
import warnings
from multiprocessing.connection import Connection

from glow_conformance.runner import judge
from glow_conformance.suite import layer_targets


def serve(fd: int) -> None:
    conn = Connection(fd)
    backend = pickle.loads(conn.recv_bytes())
    targets = layer_targets(backend)
    conn.send("ready")
    while True:
        try:
            case = conn.recv()
        except EOFError:  # the parent is gone
            return
        if case is None:
            return
        verdict, seconds = judge(case, targets.get(case.layer))
        conn.send((verdict.outcome.value, verdict.message, seconds))


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # the parent reports what matters: the verdicts
    serve(int(sys.argv[1]))
