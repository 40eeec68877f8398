"""The pass manager: a pass is a named function ``(Function) -> changed``.

Pipelines are data (names and ``Repeat`` groups), so the order of optimizations is read in
one place. The manager, not the pass, verifies after each pass when asked (always in
tests), times every pass, caps repeats, and records dumps after a named pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from glow_core.errors import GlowError
from glow_core.graph.function import Function
from glow_core.graph.printer import function_to_text
from glow_core.graph.verifier import verify

GraphPass = Callable[[Function], bool]
GRAPH_PASSES: dict[str, GraphPass] = {}


def graph_pass(name: str) -> Callable[[GraphPass], GraphPass]:
    """Register a graph pass under a kebab-case name (the function's words)."""

    def register(fn: GraphPass) -> GraphPass:
        if name in GRAPH_PASSES:
            raise TypeError(f"graph pass {name!r} registered twice")
        GRAPH_PASSES[name] = fn
        return fn

    return register


@dataclass(frozen=True)
class Repeat:
    """Run ``steps`` again and again until none changes anything (at most ``limit`` rounds)."""

    steps: tuple[str, ...]
    limit: int = 10

    def __init__(self, *steps: str, limit: int = 10):
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "limit", limit)


Step = str | Repeat


@dataclass(frozen=True)
class Pipeline:
    """An ordered list of pass names and Repeat groups."""

    steps: tuple[Step, ...]

    def __init__(self, *steps: Step):
        object.__setattr__(self, "steps", steps)

    def names(self) -> list[str]:
        out: list[str] = []
        for step in self.steps:
            out.extend(step.steps if isinstance(step, Repeat) else [step])
        return out


@dataclass
class PassReport:
    """What a pipeline run did: per-pass time and change count, and requested dumps."""

    seconds: dict[str, float] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)
    node_delta: dict[str, int] = field(default_factory=dict)
    """Nodes added (positive) or removed (negative) by each pass, over all its runs."""
    dumps: dict[str, str] = field(default_factory=dict)


def run_pipeline(
    fn: Function,
    pipeline: Pipeline,
    *,
    verify_each: bool = False,
    dump_after: str | None = None,
    report: PassReport | None = None,
) -> PassReport:
    """Run every step of ``pipeline`` on ``fn``; unknown pass names fail before anything runs."""
    unknown = [n for n in pipeline.names() if n not in GRAPH_PASSES]
    if unknown:
        raise GlowError(f"unknown graph pass(es) {unknown}; known: {sorted(GRAPH_PASSES)}")
    report = report or PassReport()
    for step in pipeline.steps:
        if isinstance(step, Repeat):
            for _ in range(step.limit):
                if not any([_run_one(fn, name, verify_each, dump_after, report) for name in step.steps]):
                    break
        else:
            _run_one(fn, step, verify_each, dump_after, report)
    return report


def _run_one(fn: Function, name: str, verify_each: bool, dump_after: str | None, report: PassReport) -> bool:
    return run_pass(
        fn, name, GRAPH_PASSES[name], verify_each=verify_each, dump_after=dump_after, report=report
    )


def run_pass(
    fn: Function,
    name: str,
    graph_pass: GraphPass,
    *,
    verify_each: bool = False,
    dump_after: str | None = None,
    report: PassReport,
) -> bool:
    """Run one pass under the manager's rules (timed, counted, verified, dumped): also for
    passes that need more than the function, e.g. the backend's answers."""
    start = time.perf_counter()
    before = len(fn)
    changed = graph_pass(fn)
    report.seconds[name] = report.seconds.get(name, 0.0) + time.perf_counter() - start
    report.changes[name] = report.changes.get(name, 0) + int(changed)
    report.node_delta[name] = report.node_delta.get(name, 0) + len(fn) - before
    if verify_each:
        verify(fn)
    if dump_after == name:
        report.dumps[name] = function_to_text(fn)
    return changed


DEFAULT_GRAPH_PIPELINE = Pipeline(
    # Before anything else: BatchNorm still sits on its Conv/FC as high-level nodes.
    "fold-batchnorm",
    # One fixed-point group: each of these can expose work for the others (a folded
    # constant makes a reshape a no-op, a removed no-op makes two nodes equal for CSE).
    Repeat(
        "eliminate-noops",  # first, so identity reshapes/transposes do not block patterns
        "merge-reshapes",
        "sink-transposes",  # before pair folding: sunk transposes meet their partners
        "fold-transpose-pairs",
        "simplify-arithmetic",
        "fold-constants",
        "cse",
        "dce",  # last: drops what the others disconnected, and unused private constants
    ),
)
