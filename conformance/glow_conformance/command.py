"""``glow conformance``: this distribution's subcommand of ``glow`` (entry point ``glow.commands``).

Small on purpose: ``glow --help`` imports it to list the command, and the suite itself
(``glow_conformance.cli``) is imported only when the command runs.
"""

from __future__ import annotations


def main(argv: list[str]) -> int:
    """run the conformance suite on a backend and write its scoreboard (glow-conformance)"""
    from glow_conformance.cli import main as conformance_main

    return int(conformance_main(argv))
