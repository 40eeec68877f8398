"""Per-call state of a compiled function: made on demand, lent to one run at a time, reused.

A run writes its inputs, activations and outputs somewhere. If every run of a function
wrote into the same memory, two threads calling it at once would read each other's
numbers. So a backend keeps that *mutable* memory (placeholders, activation arena and
whatever else a run writes) in a state object, and a run borrows one for its whole
duration; constants stay in the function, shared, since no run writes them.

States are made only when needed: a function called from one thread keeps one; ``T``
threads calling at once end up with ``T`` of them (at most ``limit``; beyond that a run
waits for one to come back), and they are reused by later runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from glow_core.cpus import usable_cpus
from glow_core.errors import BackendError

S = TypeVar("S")

DEFAULT_LIMIT = max(usable_cpus(), 2)
"""States a function makes at most by default: more runs at once than cores gain nothing
(each state costs an arena), so the others wait for a free one."""


class StatePool(Generic[S]):
    """Mutable per-run states made by ``make``: ``with pool.borrow() as state: ...``."""

    def __init__(self, make: Callable[[], S], limit: int = DEFAULT_LIMIT):
        if limit < 1:
            raise BackendError(f"a state pool needs room for at least one run, got limit {limit}")
        self._make = make
        self.limit = limit
        self._free: list[S] = []
        self._made = 0
        self._returned = threading.Condition()

    @property
    def made(self) -> int:
        """States made so far (the most runs that were in flight at once, up to ``limit``)."""
        return self._made

    def add(self, state: S) -> None:
        """Put an already-made state in the pool (a backend makes the first one while
        compiling, so that a broken kernel fails there and not in the first run)."""
        with self._returned:
            self._made += 1
            self._free.append(state)
            self._returned.notify()

    @contextmanager
    def borrow(self) -> Iterator[S]:
        """A state no other run is using, returned to the pool when the block ends."""
        state = self._take()
        try:
            yield state
        finally:
            with self._returned:
                self._free.append(state)
                self._returned.notify()

    def _take(self) -> S:
        with self._returned:
            while not self._free and self._made >= self.limit:
                self._returned.wait()
            if self._free:
                return self._free.pop()
            self._made += 1  # counted before making, so concurrent takers respect the limit
        try:
            return self._make()  # outside the lock: making one allocates arenas, builds steps
        except BaseException:
            with self._returned:
                self._made -= 1
                self._returned.notify()
            raise
