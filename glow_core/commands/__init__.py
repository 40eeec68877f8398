"""Subcommands of ``glow`` that live in their own module (one per command); ``glow_core.cli``
builds the parser and adds each with its ``add_parser(subparsers)``."""
