"""Python's cyclic garbage collector paused while a compile builds objects that all stay alive.

A compile's graph nodes, IR instructions (each with its operand list and tuples, an attribute
dict, a dealloc) and LLVM IR builder objects all live until it ends: the collections their
allocations trigger free nothing, yet each full one walks every object the process holds.
On an unrolled recurrence (the zoo's ``gru_text``: 28k graph nodes, 33k instructions) four
full collections took 1.0 s of the 2.6 s of CPU that IRGen and the IR passes spent, and
nine over the whole compile about 3 s of 12.7. ``compile_stages`` runs the pipeline paused;
IRGen and the IR passes pause on their own too (tools call them directly), and so does the
cpu backend's code emission. What a compile lets go is collected explicitly where it
matters (the graph before large weights are copied, each kernel's LLVM IR).
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
