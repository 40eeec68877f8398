"""The CLI's progress display: one live line on stderr naming the step, its elapsed time and,
for counted work, ``done/total``; nothing at all when stderr is not a terminal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from glow_core import progress
from glow_core.commands.console import shows_progress


class RichListener:
    """A ``glow_core.progress.Listener`` drawing with ``rich.progress`` on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TimeElapsedColumn

        self.display = Progress(
            SpinnerColumn(),
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,  # the line goes when the work is done: results stay uncluttered
        )
        self.name = "starting"
        self.task = self.display.add_task(self.name, total=None)

    def step(self, name: str) -> None:
        self.name = name
        self.display.reset(self.task, description=name, total=None, completed=0)

    def advance(self, done: int, total: int | None, what: str) -> None:
        description = f"{self.name} ({what})" if what else self.name
        self.display.update(self.task, completed=done, total=total, description=description)


@contextlib.contextmanager
def shown() -> Iterator[None]:
    """Show the progress of everything inside this block, when a person is watching."""
    if not shows_progress():
        yield
        return
    listener = RichListener()
    with listener.display, progress.listening(listener):
        yield
