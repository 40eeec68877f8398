"""Subcommands of ``glow`` that other distributions add (entry-point group ``glow.commands``).

glow-core never imports a plugin package: the conformance suite adds ``glow conformance``
and the backend SDK ``glow sdk`` from their own ``pyproject.toml``::

    [project.entry-points."glow.commands"]
    conformance = "glow_conformance.command:main"

The entry point's name is the subcommand; its value is a callable ``main(argv) -> int`` that
gets every argument after the subcommand's name and returns the exit status (it parses its
own options, so ``glow NAME --help`` is its help). The first line of its docstring is the
line ``glow --help`` shows. Keep the module it names small, with the real work imported
inside ``main``: ``glow --help`` loads every command plugin to list it.

As with backend plugins, each entry point loads on its own: one that fails to import, is
not callable, or takes a name a built-in command or another plugin already has is recorded
with its error, listed as broken in ``glow --help``, and refused with that error when run;
the rest of the CLI works as before.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from glow_core.errors import GlowError
from glow_core.plugins import describe_error

ENTRY_POINT_GROUP = "glow.commands"

CommandMain = Callable[[list[str]], int]
"""A plugin command: the arguments after its name -> the exit status."""


class CommandPluginError(GlowError):
    """A ``glow.commands`` entry point that cannot run: it failed to load, or its name is taken."""


@dataclass(frozen=True)
class PluginCommand:
    """One ``glow.commands`` entry point: its callable, or the error that makes it unusable."""

    name: str
    target: str
    """The entry point's value (``module:attribute``), to name it in messages."""
    distribution: str
    main: CommandMain | None = None
    error: str | None = None

    @property
    def help(self) -> str:
        """The line ``glow --help`` shows: the docstring's first line, or the error."""
        if self.error is not None:
            return f"BROKEN ({self.distribution or 'unknown distribution'}): see `glow {self.name}`"
        doc = (getattr(self.main, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else f"(from {self.distribution or self.target})"

    def run(self, argv: list[str]) -> int:
        """Run the command on ``argv``, or refuse with the reason it cannot run."""
        if self.main is None:
            raise CommandPluginError(
                f"command {self.name!r} (entry point {self.name} = {self.target!r} in group "
                f"{ENTRY_POINT_GROUP!r}, distribution {self.distribution or 'unknown'!r}) cannot run: "
                f"{self.error}; reinstall or uninstall that distribution "
                "(`glow --help` lists the working commands)"
            )
        return int(self.main(argv))


def plugin_commands(builtin: Collection[str]) -> dict[str, PluginCommand]:
    """Every installed command plugin by name, loaded one at a time; ``builtin`` names the
    commands glow-core defines itself, which no plugin may replace."""
    found = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    counts = Counter(ep.name for ep in found)
    commands: dict[str, PluginCommand] = {}
    for ep in found:
        dist = ep.dist.name if ep.dist else ""
        if ep.name in builtin:
            error = "its name is a built-in glow command, which a plugin cannot replace"
        elif counts[ep.name] > 1:
            others = sorted(e.value for e in found if e.name == ep.name and e is not ep)
            error = f"the name is also taken by entry point(s) {others}; neither is used"
        else:
            error = None
        command = PluginCommand(ep.name, ep.value, dist, error=error)
        if error is None:
            command = _loaded(ep, command)
        if ep.name not in commands or commands[ep.name].error is None:
            commands[ep.name] = command
    return commands


def _loaded(ep: importlib.metadata.EntryPoint, command: PluginCommand) -> PluginCommand:
    """``command`` with its callable, or with the error loading it gave."""
    try:
        main = ep.load()
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # SystemExit too: a plugin never ends the process
        return PluginCommand(command.name, command.target, command.distribution, error=describe_error(err))
    if not callable(main):
        error = f"{command.target} is a {type(main).__name__}, not a callable main(argv) -> int"
        return PluginCommand(command.name, command.target, command.distribution, error=error)
    return PluginCommand(command.name, command.target, command.distribution, main=main)


def add_plugin_commands(parser: argparse.ArgumentParser, subparsers: argparse._SubParsersAction) -> None:
    """List every command plugin in ``glow --help`` beside the built-in commands already in
    ``subparsers``. The entries only list and mark them: ``main`` hands a plugin command its
    arguments unparsed (``plugin_for``). A plugin named like a built-in command cannot be
    listed under that name; the help's closing lines say it is ignored, and why."""
    builtin = set(subparsers.choices)
    for name, command in plugin_commands(builtin).items():
        if name in builtin:
            parser.epilog = (parser.epilog or "") + (
                f"\nignored command plugin {name!r} ({command.target}, "
                f"{command.distribution or 'unknown distribution'}): {command.error}\n"
            )
            continue
        entry = subparsers.add_parser(name, help=command.help, add_help=False)
        entry.set_defaults(plugin_command=command)


def plugin_for(parser: argparse.ArgumentParser, name: str) -> PluginCommand | None:
    """The plugin command ``name`` of a parser built with ``add_plugin_commands``, or None
    (a built-in command, or no command of that name)."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        choices = getattr(action, "choices", None) or {}
        if name in choices:
            return choices[name].get_default("plugin_command")
    return None
