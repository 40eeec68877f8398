"""``glow sdk``: the backend SDK as a subcommand of ``glow`` (entry point ``glow.commands``),
the same commands as ``glow-sdk``.

Small on purpose: ``glow --help`` imports it to list the command, and the SDK itself
(``glow_backend_sdk.cli``, which needs copier) is imported only when the command runs.
"""

from __future__ import annotations


def main(argv: list[str]) -> int:
    """start or update a backend from the template, or check what one can run (glow-backend-sdk)"""
    from glow_backend_sdk.cli import main as sdk_main

    return int(sdk_main(argv))
