"""Running a Pipeline: the runner, not the step, times, counts, verifies and dumps.

Every leaf is timed and its changes counted (by name, summed over its runs, and each
Group by path); with ``verify_each`` the compilation is verified after every step at the
level the step left it (the graph verifier, the IR verifier, the memory plan's check); a
``dump_after`` path or name records the text right after that step or group. Unknown
names, steps at the wrong level and missing required steps fail before anything runs.

``verify_each=None`` means the process default (``set_verify_each_default``): off for
users, switched on for the whole test suite by the root conftest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from glow_core import progress
from glow_core.errors import GlowError
from glow_core.graph.printer import function_to_text
from glow_core.graph.verifier import verify
from glow_core.ir.memory import check_plan
from glow_core.ir.printer import ir_to_text, memory_to_text
from glow_core.ir.verifier import verify_ir
from glow_core.pipeline.data import Group, Item, Level, Pipeline, Repeat, Step, item_name

if TYPE_CHECKING:
    from glow_core.backend import Backend, BackendOptions
    from glow_core.graph.function import Function, Module
    from glow_core.graph.node import Node
    from glow_core.ir.instructions import IRFunction
    from glow_core.ir.memory import MemoryPlan
    from glow_core.runtime.compiled import CompiledFunction

Resolver = Callable[[str], Step]
"""A registered step by name; raises KeyError for names it does not know."""

_verify_each_default = False


def set_verify_each_default(enabled: bool) -> bool:
    """Make ``verify_each=None`` mean ``enabled`` in this process; returns the old default."""
    global _verify_each_default
    old, _verify_each_default = _verify_each_default, enabled
    return old


def verify_each_default() -> bool:
    """What ``verify_each=None`` means now."""
    return _verify_each_default


@dataclass
class PassReport:
    """What a run did: per-leaf time, change count and node delta (summed by name over its
    runs), per-path time of every step and group, and the requested dumps."""

    seconds: dict[str, float] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)
    node_delta: dict[str, int] = field(default_factory=dict)
    """Nodes added (positive) or removed (negative) by each graph-level step, over all its runs."""
    path_seconds: dict[str, float] = field(default_factory=dict)
    dumps: dict[str, str] = field(default_factory=dict)


@dataclass
class Compilation:
    """One model on its way to code: what every step reads and writes, and the figures."""

    level: Level
    backend: Backend | None = None
    options: BackendOptions | None = None
    source: Any = None
    """What the ``import`` step reads: a Module, an ONNX file, bytes or ModelProto."""
    input_shapes: Mapping[str, Any] | None = None
    base_dir: Any = None
    precision_mode: Any = None
    """The ``precision=`` asked for (None, ``"fp16"``, ``"bf16"`` or a ``Quantize``)."""
    precision: Any = None
    """What the precision mode did (a ``PrecisionOutcome``; set when the compile starts)."""
    module: Module | None = None
    function: Function | None = None
    order: list[Node] = field(default_factory=list)
    ir: IRFunction | None = None
    plan: MemoryPlan | None = None
    compiled: CompiledFunction | None = None
    consume: bool = False
    """The caller keeps only ``compiled`` (``glow_core.compile``): code generation drops the
    graph first and lets the backend release each constant once it holds its own copy
    (``IRFunction.release_constants``), so the weights are not in memory twice."""
    passes: PassReport = field(default_factory=PassReport)
    seconds: dict[str, float] = field(default_factory=dict)
    """Seconds of each top-level step or group: the stage times ``glow report`` shows."""
    node_counts: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    last_changed: dict[str, bool] = field(default_factory=dict)
    """Whether each step's latest run changed anything (read by ``Group.when``)."""


def verify_compilation(c: Compilation) -> None:
    """Check every invariant of what ``c`` holds at its level; raises VerifyError."""
    if c.level in (Level.GRAPH, Level.SCHEDULED):
        assert c.function is not None
        verify(c.function)
    elif c.level in (Level.IR, Level.PLANNED):
        assert c.ir is not None
        verify_ir(c.ir)
        if c.level is Level.PLANNED:
            assert c.plan is not None
            check_plan(c.plan)


def text_of(c: Compilation) -> str:
    """The text form of what ``c`` holds: the graph, the IR, or the memory plan."""
    if c.level in (Level.GRAPH, Level.SCHEDULED):
        assert c.function is not None
        return function_to_text(c.function)
    if c.level is Level.IR:
        assert c.ir is not None
        return ir_to_text(c.ir)
    if c.level in (Level.PLANNED, Level.CODE):
        assert c.ir is not None and c.plan is not None
        return memory_to_text(c.ir, c.plan)
    return ""


def check_pipeline(
    pipeline: Pipeline, resolve: Resolver, start: Level, required: Collection[str] = ()
) -> dict[str, Step]:
    """Every leaf resolved by path; refuses unknown names, steps at the wrong level, missing
    required steps and steps before what they must follow, naming each problem."""
    steps: dict[str, Step] = {}
    unknown: list[str] = []
    for path, leaf in pipeline.leaves():
        if isinstance(leaf, Step):
            steps[path] = leaf
            continue
        try:
            steps[path] = resolve(leaf)
        except KeyError:
            unknown.append(leaf)
    if unknown:
        raise GlowError(f"unknown pipeline step(s) {unknown}; `glow dump --list-steps` lists the steps")
    problems = _level_problems(pipeline.steps, "", steps, start)[1]
    first: dict[str, int] = {}
    for position, step in enumerate(steps.values()):
        first.setdefault(step.name, position)
    for step in steps.values():
        problems += [
            f"{step.name!r} must run after {a!r}" for a in step.after if first.get(a, -1) > first[step.name]
        ]
    problems += [f"required step {name!r} is missing" for name in required if name not in first]
    if problems:
        raise GlowError("pipeline refused: " + "; ".join(problems))
    return steps


def _level_problems(
    items: tuple[Item, ...], prefix: str, steps: dict[str, Step], level: Level
) -> tuple[Level, list[str]]:
    problems: list[str] = []
    for item in items:
        path = f"{prefix}/{item_name(item)}" if prefix else item_name(item)
        if isinstance(item, Repeat | Group):
            inner = path if isinstance(item, Group) else prefix
            after, found = _level_problems(item.steps, inner, steps, level)
            problems += found
            conditional = isinstance(item, Repeat) or item.when is not None
            if conditional and after is not level:
                problems.append(f"{path!r} may run or not, so it must keep the level ({level.value})")
            level = after
            continue
        step = steps[path]
        if step.needs is not level:
            problems.append(f"{path!r} needs {step.needs.value} but runs on {level.value}")
        level = step.result_level
    return level, problems


def run_steps(
    pipeline: Pipeline,
    state: Compilation,
    resolve: Resolver,
    *,
    verify_each: bool | None = None,
    dump_after: str | None = None,
    stages: Mapping[str, str] | None = None,
    keep_text: bool = False,
    stop_before: str | None = None,
    required: Collection[str] = (),
) -> PassReport:
    """Run ``pipeline`` on ``state``; returns (and fills) ``state.passes``.

    ``stages`` maps a top-level entry's name to a stage label: after it, the node count
    (and with ``keep_text`` the text) is recorded under that label. ``stop_before`` ends
    the run before the top-level entry of that name (the graph stages stop before the
    support check, a dump before code generation).
    """
    steps = check_pipeline(pipeline, resolve, state.level, required)
    if dump_after is not None and not any(
        dump_after in (path, item_name(item)) for path, item, _depth in pipeline.walk()
    ):
        raise GlowError(f"no step or group {dump_after!r} to dump after; `glow dump --list-steps` lists them")
    run = _Run(state, steps, verify_each_default() if verify_each is None else verify_each, dump_after)
    for item in pipeline.steps:
        name = item_name(item)
        if name == stop_before:
            break
        backend = state.backend.info().name if name == "codegen" and state.backend is not None else None
        progress.step(f"{name} ({backend})" if backend else name)  # drawn by the CLI only
        start = time.perf_counter()
        run.item(item, "")
        state.seconds[name] = state.seconds.get(name, 0.0) + time.perf_counter() - start
        label = (stages or {}).get(name)
        if label is not None:
            if state.level is Level.GRAPH and state.function is not None:
                state.node_counts[label] = len(state.function)
            if keep_text:
                state.texts[label] = text_of(state)
    return state.passes


class _Run:
    """One pass over a pipeline's entries (the recursion of ``run_steps``)."""

    def __init__(self, state: Compilation, steps: dict[str, Step], verify_each: bool, dump_after: str | None):
        self.state, self.steps, self.verify_each, self.dump_after = state, steps, verify_each, dump_after

    def item(self, item: Item, prefix: str) -> bool:
        if isinstance(item, Repeat):
            changed = False
            for _ in range(item.limit):
                if not any([self.item(child, prefix) for child in item.steps]):
                    break
                changed = True
            return changed
        path = f"{prefix}/{item_name(item)}" if prefix else item_name(item)
        if isinstance(item, Group):
            if item.when is not None and not self.state.last_changed.get(item.when, False):
                return False
            start = time.perf_counter()
            changed = any([self.item(child, path) for child in item.steps])
            self._finish(item.name, path, start)
            return changed
        return self.leaf(self.steps[path], path)

    def leaf(self, step: Step, path: str) -> bool:
        state, report = self.state, self.state.passes
        before = len(state.function) if state.level is Level.GRAPH and state.function is not None else None
        start = time.perf_counter()
        changed = bool(step.run(state))
        report.seconds[step.name] = report.seconds.get(step.name, 0.0) + time.perf_counter() - start
        report.changes[step.name] = report.changes.get(step.name, 0) + int(changed)
        state.level = step.result_level
        if before is not None and state.function is not None:
            delta = len(state.function) - before
            report.node_delta[step.name] = report.node_delta.get(step.name, 0) + delta
        state.last_changed[step.name] = changed
        if self.verify_each:
            verify_compilation(state)
        self._finish(step.name, path, start)
        return changed

    def _finish(self, name: str, path: str, start: float) -> None:
        report = self.state.passes
        report.path_seconds[path] = report.path_seconds.get(path, 0.0) + time.perf_counter() - start
        if self.dump_after in (name, path):
            report.dumps[self.dump_after] = text_of(self.state)
