"""One exception hierarchy for everything a user can get wrong.

Every error a user can provoke (a bad model, a bad input, a missing backend) is a
``GlowError`` whose message says what went wrong, where, and what to do, so the CLI can
print it as one line instead of a traceback from deep inside the compiler.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class GlowError(Exception):
    """Base of every error glow-py raises on purpose."""


class ShapeError(GlowError):
    """A type rule refused its operands (names both types and the node)."""


class MemoryLimitError(ShapeError):
    """A tensor or a memory plan is larger than the budget (``glow_core.limits``) allows;
    raised before anything of that size is allocated, naming what and how to raise it."""


class VerifyError(GlowError):
    """A graph or IR function broke an invariant (a compiler bug or a bad hand-built graph)."""


class UnsupportedOpError(GlowError):
    """The ONNX loader, a lowering or a backend cannot handle an operator."""


class ModelLoadError(GlowError):
    """A model file could not be read or parsed."""


class TextParseError(GlowError):
    """Graph or IR text that does not parse: names the line, what was expected and what was
    found."""


class ShapeNeededError(ModelLoadError):
    """An input's shape, or one dimension of it, is not in the model: the caller gives it.

    The remedy depends on who called: Python code passes ``input_shapes``, the command line
    ``--shape``; ``cli_text`` is the command line's wording."""

    def __init__(self, what: str, input_name: str):
        self.what, self.input_name = what, input_name
        super().__init__(f"{what}; glow needs static shapes: pass input_shapes={{{input_name!r}: [...]}}")

    def cli_text(self) -> str:
        return f"{self.what}; glow needs static shapes: give them with --shape {self.input_name}=D1,D2,..."


class OracleError(GlowError):
    """The independent reference (onnxruntime) cannot run what glow is compared with."""


class InputError(GlowError):
    """An input given to a compiled function has the wrong name, dtype or shape."""


class BackendError(GlowError):
    """A backend is missing, failed to load, or refused to compile."""


class PartitionError(GlowError):
    """A model cannot be split across the named backends as asked (a partition option names
    a missing node, a node is bigger than every device that runs it...)."""


class BundleError(GlowError):
    """An ahead-of-time bundle cannot be written or loaded as asked (a bad target, name or
    output directory, a backend that makes no native code, a damaged bundle)."""


class NoBackendError(UnsupportedOpError):
    """No backend of the caller's list runs a node (refused before anything compiles)."""


class DifferentiationError(GlowError):
    """A function cannot be differentiated as asked: a node on the path from a parameter
    to the loss has no gradient rule, the loss is not a scalar, or a parameter is not a
    weight of the function."""


def exit_status(command: Callable[[], int]) -> int:
    """Run a command-line action: a GlowError becomes one ``error: ...`` line on stderr and
    exit status 2 (a user's mistake never shows a traceback); anything else propagates."""
    try:
        return int(command())
    except GlowError as err:
        text = err.cli_text() if isinstance(err, ShapeNeededError) else str(err)
        print(f"error: {text}", file=sys.stderr)
        return 2
