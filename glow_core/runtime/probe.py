"""Probes: values the ONNX loader needs while building, computed on the inputs of one call.

glow graphs have no control flow and static shapes, so the loader must know an If's
condition, each Loop iteration's condition or a target shape while it builds the graph.
When such a value is computed from the inputs, the loader asks its resolver (``resolve=``
of ``load_onnx``). The resolver here saves the value's node as an extra output of the
module built so far (a *probe*), compiles that partial module on the session's backend and
runs it on the call's inputs. Because the probes stay outputs of the final module too, a
later call can read them back from its own run and check that the compiled function still
fits its inputs (see ``session.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from glow_core.errors import UnsupportedOpError
from glow_core.graph.function import Module
from glow_core.graph.node import Node, Placeholder
from glow_core.runtime.compiled import CompiledFunction

MAX_PROBES = 128
"""The most load-time values one specialization may compute (one per data-dependent Loop
iteration): each costs a compilation, so a runaway loop is refused rather than built."""


class InputNeeded(Exception):
    """The loader needs the value of graph input ``name`` itself: load again with it static.

    A signal to the session, never seen by users: it is not a GlowError on purpose."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class ProbeResolver:
    """The loader's resolver for one call: earlier answers replayed, new ones computed.

    ``known`` are the values of the first requests, already established for this call (read
    back from the run of a cached function); requests past them are computed by compiling
    the module built so far. ``answers`` and ``probes`` (the output holding each answer)
    describe the specialization once loading is done.
    """

    def __init__(
        self,
        feeds: dict[str, np.ndarray],
        known: Sequence[np.ndarray],
        compile_module: Callable[[Module], CompiledFunction],
        max_probes: int = MAX_PROBES,
    ):
        self.feeds = feeds
        self.known = list(known)
        self.compile_module = compile_module
        self.max_probes = max_probes
        self.answers: list[np.ndarray] = []
        self.probes: list[str] = []
        self.compilations = 0
        self._by_node: dict[int, int] = {}  # a node asked for again (after a subgraph) keeps its answer

    def __call__(self, module: Module, node: Node, name: str) -> np.ndarray:
        if isinstance(node, Placeholder) and not node.is_output:
            raise InputNeeded(node.name)
        index = self._by_node.get(id(node))
        if index is not None:
            return self.answers[index]
        index = len(self.answers)
        if index >= self.max_probes:
            raise UnsupportedOpError(
                f"loading needs more than {self.max_probes} values computed from the inputs "
                f"(the last: tensor {name!r}); a Loop whose condition depends on data needs one per "
                "iteration: pass a larger max_probes to glow_core.load if the loop really runs that long"
            )
        output = module.unique_name(f"load_time_{index}")
        module.function.save(node, output)
        self.probes.append(output)
        value = self.known[index] if index < len(self.known) else self._compute(module, output)
        self._by_node[id(node)] = index
        self.answers.append(value)
        return value

    def _compute(self, module: Module, output: str) -> np.ndarray:
        """Run the module built so far, whose outputs are the probes, and read the last one."""
        compiled = self.compile_module(module)
        self.compilations += 1
        results = compiled.run({n: v for n, v in self.feeds.items() if n in compiled.input_types})
        return results[output]
