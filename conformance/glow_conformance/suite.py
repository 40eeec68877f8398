"""The suite for one backend: generate every layer's cases, apply xfails, run, score.

``plan`` only generates (the pytest plugin turns a plan into test items); ``run_plan`` runs
one and returns a Scoreboard (the CLI). Both read the same options, so a pytest run and a
``glow conformance`` run of one backend check exactly the same cases.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.metadata
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from glow_conformance import models_layer, onnx_layer, partitions_layer, primitives_layer
from glow_conformance.case import LAYERS, Case, resolve_seed
from glow_conformance.isolation import DEFAULT_TIMEOUT, run_in_process, run_isolated
from glow_conformance.onnx_layer import NodeRunner
from glow_conformance.results import CaseResult, Scoreboard
from glow_conformance.runner import UnknownXfail, run_case
from glow_conformance.xfail import Xfails, load_xfails
from glow_core.backend import Backend
from glow_core.plugins import registry


@dataclass(frozen=True)
class SuiteOptions:
    """What to run: which layers, whether slow models too, which ids, which node-test data."""

    layers: tuple[str, ...] = LAYERS
    slow: bool = False
    select: tuple[str, ...] = ()
    """Shell-style patterns on case ids (``MatMul[*``, ``onnx:test_add*``); empty: every case."""
    onnx_data: str | None = None
    """A directory of ONNX node-test cases; None: those of the installed onnx."""
    seed: int | None = None
    """The run seed every case's inputs derive from; None: ``case.resolve_seed`` (fresh each
    run unless ``$GLOW_CONFORMANCE_SEED`` pins it). A failure's report names it for replay."""


@dataclass
class Plan:
    """The cases to run for one backend (unknown xfails first, as errors) and their targets."""

    backend: Backend
    cases: list[Case]
    xfails: Xfails
    targets: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def run(self, case: Case) -> CaseResult:
        return run_case(case, self.targets.get(case.layer), self.xfails)


def _generate(layer: str, backend: Backend, options: SuiteOptions, xfails: Xfails) -> list[Case]:
    if layer == "primitives":
        return primitives_layer.generate(backend.info(), xfails.reasons)
    if layer == "onnx":
        return onnx_layer.generate(options.onnx_data)
    if layer == "partitions":
        return partitions_layer.generate(options.slow)
    return models_layer.generate(options.slow)


def selected(cases: list[Case], patterns: Sequence[str]) -> list[Case]:
    """The cases whose id is one of ``patterns`` or matches one as a shell-style pattern (all
    when none): an exact id selects its case although its brackets read as a pattern."""
    if not patterns:
        return cases
    return [c for c in cases if any(c.id == p or fnmatch.fnmatchcase(c.id, p) for p in patterns)]


def plan(backend: Backend | str, options: SuiteOptions | None = None) -> Plan:
    """Every case for ``backend`` (an instance, or a registered name) under ``options``."""
    options = options or SuiteOptions()
    seed = resolve_seed(options.seed)
    if isinstance(backend, str):
        backend = registry().get(backend)
    xfails = load_xfails(backend)
    generated = {layer: _generate(layer, backend, options, xfails) for layer in options.layers}
    known = {c.id for cases in generated.values() for c in cases}
    unknown: list[Case] = [
        UnknownXfail(i, "xfail", xfails.sources[i]) for i in xfails.unknown(known, options.layers)
    ]
    cases = unknown + [c for layer in options.layers for c in selected(generated[layer], options.select)]
    cases = [dataclasses.replace(c, run_seed=seed) for c in cases]
    return Plan(backend, cases, xfails, layer_targets(backend), seed)


def layer_targets(backend: Backend) -> dict[str, Any]:
    """What each layer's cases run on: the backend itself, or for the ONNX layer a node-test
    runner around it (the partitions layer adds the reference interpreter itself)."""
    return {
        "primitives": backend,
        "models": backend,
        "partitions": backend,
        "onnx": onnx_layer.glow_runner(backend),
    }


def run_plan(
    plan: Plan,
    progress: Callable[[CaseResult], None] | None = None,
    *,
    isolate: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = 1,
) -> Scoreboard:
    """Run every case of ``plan``; ``progress`` sees each result as it comes.

    Isolated (the default), each case runs in a worker process with a time limit of
    ``timeout`` seconds, so a crashing or hanging kernel is recorded by its case id and the
    run goes on (``isolation.py``); the backend object must then be picklable (a class at
    module level), as every plugin's is. ``jobs`` workers run cases side by side (one by
    default here: a test suite already runs in parallel; the CLI uses one per CPU).
    """
    info = plan.backend.info()
    board = Scoreboard(info.name, describe("backend", info.version) | {"seed": plan.seed})
    start = time.perf_counter()
    results = run_isolated(plan, timeout, jobs) if isolate else run_in_process(plan)
    for result in results:
        board.add(result)
        if progress:
            progress(result)
    board.seconds = time.perf_counter() - start
    return board


def run_suite(backend: Backend | str, options: SuiteOptions | None = None) -> Scoreboard:
    """Plan and run in one call: the one line a backend's own tests need
    (``assert not run_suite("cpu", SuiteOptions(layers=("primitives",))).problems()``)."""
    return run_plan(plan(backend, options))


def run_references(options: SuiteOptions) -> list[Scoreboard]:
    """The node tests run by onnxruntime (when installed) and onnx.reference: reference columns."""
    runners = [r for r in (onnx_layer.onnxruntime_runner(), onnx_layer.reference_runner()) if r]
    cases = selected(onnx_layer.generate(options.onnx_data), options.select)
    boards = []
    for runner in runners:
        boards.append(_run_reference(runner, cases))
    return boards


def _run_reference(runner: NodeRunner, cases: list[Case]) -> Scoreboard:
    board = Scoreboard(runner.name, describe("reference", runner.version))
    start = time.perf_counter()
    for case in cases:
        board.add(run_case(case, runner, Xfails()))
    board.seconds = time.perf_counter() - start
    return board


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def describe(role: str, version: str) -> dict[str, Any]:
    """Facts that make a scoreboard reproducible: what ran (a backend or a reference), with
    which versions, when."""
    return {
        "role": role,
        "version": version,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {d: _version(d) for d in ("glow-core", "glow-conformance", "onnx", "onnxruntime")},
    }
