"""The graph pass registry: a pass is a named function ``(Function) -> changed``.

Pipelines are data (``glow_core.pipeline.data``: names, ``Repeat`` and ``Group``), so the
order of optimizations is read in one place. ``run_pipeline`` runs a graph-only pipeline
under the same runner as the whole compile pipeline, which times every pass, caps
repeats, verifies after each pass when asked (always in tests) and records dumps.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.graph.function import Function
from glow_core.pipeline.data import Level, Pipeline, Repeat, Step, doc_line, registrar
from glow_core.pipeline.runner import Compilation, PassReport, run_steps

GraphPass = Callable[[Function], bool]
GRAPH_PASSES: dict[str, GraphPass] = {}


graph_pass = registrar(GRAPH_PASSES, "graph pass")
"""``@graph_pass("kebab-name")``: register a graph pass under a kebab-case name (the function's words)."""


def graph_step(name: str) -> Step:
    """The registered graph pass ``name`` as a pipeline step; KeyError when there is none."""
    graph_pass = GRAPH_PASSES[name]
    return Step(name, lambda c: graph_pass(c.function), Level.GRAPH, doc=doc_line(graph_pass))


def run_pipeline(
    fn: Function,
    pipeline: Pipeline,
    *,
    verify_each: bool | None = None,
    dump_after: str | None = None,
    report: PassReport | None = None,
) -> PassReport:
    """Run every step of ``pipeline`` (graph passes only) on ``fn``; unknown pass names fail
    before anything runs. ``verify_each=None``: the process default (on in tests)."""
    state = Compilation(level=Level.GRAPH, function=fn, module=fn.module, passes=report or PassReport())
    return run_steps(pipeline, state, graph_step, verify_each=verify_each, dump_after=dump_after)


DEFAULT_GRAPH_PIPELINE = Pipeline(
    # Before anything else: BatchNorm still sits on its Conv/FC as high-level nodes.
    "fold-batchnorm",
    # Before fold-constants and lowering: an imported QDQ model's integer layers become int8
    # nodes while their DequantizeLinear / QuantizeLinear boundaries are still whole.
    "fold-qdq",
    # One fixed-point group: each of these can expose work for the others (a folded
    # constant makes a reshape a no-op, a removed no-op makes two nodes equal for CSE).
    Repeat(
        "eliminate-noops",  # first, so identity reshapes/transposes do not block patterns
        "forward-concat-slices",
        "merge-reshapes",
        "sink-transposes",  # before pair folding: sunk transposes meet their partners
        "fold-transpose-pairs",
        "simplify-arithmetic",
        "fold-constants",
        "cse",
        "dce",  # last: drops what the others disconnected, and unused private constants
    ),
)
