"""Progress of long steps, told to whoever listens: the CLI draws it, libraries stay silent.

The compiler announces each step (``loading model``, ``optimize``, ``codegen (cpu)``...) and
each counted unit of work (a conformance case, a profiling run) here; nothing is printed
unless a caller installed a listener with ``listening``. The CLI installs one that draws a
live line on a terminal (``glow_core.commands.progress``); a Python user calling
``glow_core.compile`` sees nothing, and the listener is per thread and per task (a context
variable), so one caller's progress never shows in another's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol


class Listener(Protocol):
    """What a progress display implements."""

    def step(self, name: str) -> None:
        """A new step has started (the previous one, if any, is done)."""

    def advance(self, done: int, total: int | None, what: str) -> None:
        """``done`` of ``total`` units of the current step (``what`` names a unit: ``cases``)."""


_LISTENER: ContextVar[Listener | None] = ContextVar("glow_progress_listener", default=None)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[Listener]:
    """Send the progress of everything run inside this block to ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield listener
    finally:
        _LISTENER.reset(token)


def step(name: str) -> None:
    """Announce that step ``name`` starts (free when nobody listens)."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.step(name)


def advance(done: int, total: int | None = None, what: str = "") -> None:
    """Announce ``done`` of ``total`` units of the current step."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.advance(done, total, what)
