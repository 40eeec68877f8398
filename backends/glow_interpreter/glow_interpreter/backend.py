"""The interpreter backend: declares every primitive and executes the IR with numpy."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from glow_core.backend import Backend, BackendInfo, BackendOptions
from glow_core.errors import BackendError
from glow_core.graph.activations import ACTIVATION_OF_KIND, LAYER_KINDS
from glow_core.graph.node import Node
from glow_core.ir.instructions import IRFunction
from glow_core.spec import NODES, PRIMITIVES
from glow_interpreter import __version__
from glow_interpreter.executor import InterpretedFunction


class InterpreterOptions(BackendOptions):
    """Interpreter options."""

    poison: bool = True
    """Fill activations and outputs with a NaN pattern before each run, so unwritten
    elements show instead of passing silently (off only to measure the cost)."""


class InterpreterBackend(Backend):
    """Runs every primitive's reference semantics on one arena per memory region.

    ``keep`` names high-level node kinds to leave unlowered (run by their declared semantics):
    the reference for a backend that keeps them for fused kernels, with the activations that
    can be fused into a kept Conv or FullyConnected. The registered plugin keeps none.
    """

    name = "interpreter"
    Options = InterpreterOptions

    def __init__(self, keep: Iterable[str] = ()):
        unknown = sorted(set(keep) - set(NODES))
        if unknown:
            raise BackendError(
                f"interpreter: cannot keep {unknown}: not high-level node kinds {sorted(NODES)}"
            )
        self.keep = frozenset(keep)

    def info(self) -> BackendInfo:
        return _info(self.name, self.keep)

    def should_lower(self, node: Node) -> bool:
        return node.kind not in self.keep

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> InterpretedFunction:  # type: ignore[override]
        return InterpretedFunction(ir, options.poison)


@functools.lru_cache(maxsize=16)
def _info(name: str, keep: frozenset[str]) -> BackendInfo:
    # Cached: the core asks for info() once per node when it checks support, and building it
    # (the options' JSON schema above all) took about 9 ms, a third of a conformance run.
    declared = {**PRIMITIVES, **{kind: NODES[kind] for kind in sorted(keep)}}
    return BackendInfo(
        name=name,
        version=__version__,
        device="reference",
        supports={kind: sorted(k.name for k in spec.kinds) for kind, spec in declared.items()},
        priority=10,
        options_schema=InterpreterOptions.model_json_schema(),
        fused_activations={kind: sorted(ACTIVATION_OF_KIND) for kind in sorted(keep & set(LAYER_KINDS))},
    )
