"""Python's cyclic garbage collector paused while the instruction IR is built and rewritten.

IRGen and the IR passes make tens of thousands of instructions (each with its operand list
and tuples, an attribute dict, a dealloc), and all of them stay alive: the collections
their allocations trigger free nothing, yet each full one walks every object the process
holds. On an unrolled recurrence (the zoo's ``gru_text``: 33k instructions) four full
collections took 1.0 s of the 2.6 s of CPU that IRGen and the IR passes spent. Paused,
one young collection walks the new objects once, after the passes, and one full
collection follows later in the compile (0.3 s).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from functools import wraps
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the block, switched back on only if it was on: another
    compile running in a thread of the same process may have paused it too, and the one
    that paused it first is the one that turns it back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def without_collector(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run under ``collector_paused``."""

    @wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return fn(*args, **kwargs)

    return paused
