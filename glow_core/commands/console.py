"""Where the CLI writes: aligned tables on stdout, progress on stderr only for a person.

Tables and progress come from ``rich``: it aligns columns by their displayed width and
draws live progress without the flicker a hand-written ``\\r`` loop gives. Piped or
redirected output gets the same table as plain text (no colour, no control codes) and no
progress at all, so ``glow ... | grep`` and log files stay clean.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

PIPE_WIDTH = 200
"""Width of tables written to a pipe or file (rich would wrap them at 80 columns)."""


def stdout_console() -> Console:
    """A console for results on stdout: the terminal's width, or ``PIPE_WIDTH`` when piped."""
    interactive = sys.stdout.isatty()
    return Console(
        file=sys.stdout,
        width=None if interactive else PIPE_WIDTH,
        highlight=False,
        emoji=False,
        no_color=not interactive,
    )


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    numeric: Sequence[str] = (),
) -> None:
    """``rows`` under ``columns`` as one aligned table on stdout; ``numeric`` columns are
    right-aligned so digits line up."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    stdout_console().print(table)


def shows_progress() -> bool:
    """Progress is for a person watching: only when stderr is a terminal."""
    return sys.stderr.isatty()
