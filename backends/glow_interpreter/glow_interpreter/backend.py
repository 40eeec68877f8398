"""The interpreter backend: declares every primitive and executes the IR with numpy."""

from __future__ import annotations

from glow_core.backend import Backend, BackendInfo, BackendOptions
from glow_core.ir.instructions import IRFunction
from glow_core.spec import PRIMITIVES
from glow_interpreter import __version__
from glow_interpreter.executor import InterpretedFunction


class InterpreterOptions(BackendOptions):
    """Interpreter options."""

    poison: bool = True
    """Fill activations and outputs with a NaN pattern before each run, so unwritten
    elements show instead of passing silently (off only to measure the cost)."""


class InterpreterBackend(Backend):
    """Runs every primitive's reference semantics on one arena per memory region."""

    name = "interpreter"
    Options = InterpreterOptions

    def info(self) -> BackendInfo:
        return BackendInfo(
            name=self.name,
            version=__version__,
            device="reference",
            supports={kind: sorted(k.name for k in spec.kinds) for kind, spec in PRIMITIVES.items()},
            priority=10,
            options_schema=InterpreterOptions.model_json_schema(),
        )

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> InterpretedFunction:  # type: ignore[override]
        return InterpretedFunction(ir, options.poison)
