"""What a backend's declared primitives can run: models, ONNX node tests, and what to add next.

Each workload is lowered for the backend (its ``should_lower`` decides what stays
high-level) and the (kind, selecting element kind) pairs it needs are compared with what
the backend declares; views (Reshape, BitCast) are the core's and never needed. The node
tests are the conformance suite's own (``glow_conformance.onnx_data``), run by the reference
interpreter with the backend's lowering decisions: a test counts when glow passes it there,
and is runnable when it needs nothing the backend lacks. A workload that needs exactly one
missing pair counts toward that pair's unlock.

A backend that claims only part of the core set (``glow-sdk new NAME --primitives ...``)
runs models beside a catch-all (``--backend NAME,cpu``): for it, each zoo model is also
partitioned between the backend and the reference interpreter (no compile), and the report
says how much of the model's work the backend would run, and in how many partitions.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from glow_conformance.onnx_data import load_node_tests
from glow_conformance.onnx_layer import glow_runner
from glow_conformance.results import Outcome
from glow_interpreter.backend import InterpreterBackend

from glow_core.backend import Backend, selecting_kind
from glow_core.graph.node import Node
from glow_core.model_zoo import MODELS
from glow_core.primitives import CORE
from glow_core.runtime.partitioned import plan_partitions
from glow_core.runtime.pipeline import graph_stages, load_model
from glow_core.spec import NODES

Need = tuple[str, str]  # (operator kind, the element kind that selects its kernel)


@dataclass
class Coverage:
    """Runnable workloads out of those glow itself can run, and what would unlock more."""

    backend: str
    models_runnable: list[str] = field(default_factory=list)
    models_blocked: dict[str, list[Need]] = field(default_factory=dict)
    node_tests_runnable: int = 0
    node_tests_blocked: int = 0
    node_tests_not_passed: int = 0
    """Node tests glow's reference interpreter does not pass (refused or wrong): no backend
    can run them by declaring more."""
    unlocks: Counter = field(default_factory=Counter)
    shares: dict[str, Share] = field(default_factory=dict)
    """For a backend claiming part of the core set: per model, what it runs beside a catch-all."""

    def summary(self) -> str:
        total_models = len(self.models_runnable) + len(self.models_blocked)
        passed = self.node_tests_runnable + self.node_tests_blocked
        lines = [f"backend {self.backend}"]
        if total_models:
            alone = " alone" if self.shares else ""
            lines.append(f"models: {len(self.models_runnable)}/{total_models} runnable{alone}")
        for model, missing in self.models_blocked.items():
            lines.append(f"  {model}: missing {', '.join(f'{k}[{e}]' for k, e in missing)}")
        if self.shares:
            lines.append(
                f"with a catch-all backend after it (--backend {self.backend},cpu), "
                f"{self.backend}'s share of each model:"
            )
            lines += [f"  {model}: {share}" for model, share in self.shares.items()]
        if passed or self.node_tests_not_passed:
            share = f" ({100 * self.node_tests_runnable / passed:.1f}%)" if passed else ""
            lines.append(
                f"ONNX node tests: {self.node_tests_runnable}/{passed}{share} of those glow's reference "
                f"interpreter passes need only declared kinds ({self.node_tests_not_passed} it does not pass)"
            )
        if self.unlocks:
            lines.append("primitives that would unlock the most (workloads missing only that one):")
            lines += [f"  {kind}[{elem}]: {count}" for (kind, elem), count in self.unlocks.most_common(10)]
        return "\n".join(lines) + "\n"

    def count(self, missing: list[Need]) -> bool:
        """Count one workload's missing pairs toward their unlock; whether it is runnable."""
        if len(missing) == 1:
            self.unlocks[missing[0]] += 1
        return not missing


@dataclass(frozen=True)
class Share:
    """What a backend runs of one model when a catch-all backend runs the rest."""

    flops: float
    """The backend's fraction of the model's FLOPs (as the partitioner counts them)."""
    partitions: int
    """Partitions on the backend."""
    total: int
    """Partitions on both."""

    def __str__(self) -> str:
        return f"{100 * self.flops:.1f}% of the FLOPs, in {self.partitions} of {self.total} partitions"


def share_beside_catch_all(model: onnx.ModelProto, backend: Backend) -> Share:
    """How ``model`` splits between ``backend`` and the reference interpreter (partitioned,
    not compiled): the figures ``glow run MODEL --backend NAME,cpu`` would print."""
    plan = plan_partitions(load_model(model), [backend, InterpreterBackend()])
    mine = [p for p in plan.partitions if p.device.label == plan.devices[0].label]
    total_flops = sum(p.flops for p in plan.partitions)
    flops = sum(p.flops for p in mine) / total_flops if total_flops else 0.0
    return Share(flops, len(mine), len(plan.partitions))


def claims_part_of_the_core(backend: Backend) -> bool:
    """Whether ``backend`` declares only some of the core primitives (it needs a catch-all)."""
    return not set(backend.info().supports) >= CORE


def need_of(node: Node) -> Need | None:
    """What running ``node`` asks of a backend; None for views and outputs (the core's)."""
    if node.kind == "Save" or node.spec.view:
        return None
    return node.kind, selecting_kind(node).name


def needs_of(model: onnx.ModelProto | str, backend: Backend) -> set[Need]:
    """The pairs a model needs after lowering for ``backend``."""
    fn = graph_stages(load_model(model), backend).function
    assert fn is not None
    return {need for n in fn.nodes if (need := need_of(n)) is not None}


def missing_needs(needs: set[Need], backend: Backend) -> list[Need]:
    """The needs ``backend`` does not declare, sorted."""
    supports = backend.info().supports
    return sorted((kind, elem) for kind, elem in needs if elem not in supports.get(kind, ()))


class NeedRecorder(InterpreterBackend):
    """The reference interpreter lowering as ``target`` does, noting what each compile needs.

    It keeps every node kind the target keeps (the interpreter runs kept nodes by their
    lowering), so the needs are the target's; it runs whatever it is asked, so the node test
    itself says whether glow can run the case at all.
    """

    def __init__(self, target: Backend):
        super().__init__(keep=NODES)
        self.target = target
        self.needs: set[Need] = set()

    def should_lower(self, node: Node) -> bool:
        return self.target.should_lower(node)

    def supports_fused_activation(self, layer: Node, activation: Node) -> bool:
        return self.target.supports_fused_activation(layer, activation)

    def is_op_supported(self, node: Node) -> bool:
        need = need_of(node)
        if need is not None:
            self.needs.add(need)
        return super().is_op_supported(node)


def check_node_tests(coverage: Coverage, backend: Backend, limit: int | None = None) -> None:
    """Add the ONNX node tests (the first ``limit``) to ``coverage``."""
    recorder = NeedRecorder(backend)
    runner = glow_runner(recorder)
    for test in load_node_tests()[:limit]:
        recorder.needs = set()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # NaN/inf are legitimate in many node tests
            verdict = runner.check(test)
        if verdict.outcome is not Outcome.PASSED:
            coverage.node_tests_not_passed += 1
        elif coverage.count(missing_needs(recorder.needs, backend)):
            coverage.node_tests_runnable += 1
        else:
            coverage.node_tests_blocked += 1


def check_backend(
    backend: Backend, *, models: bool = True, node_tests: bool = True, limit: int | None = None
) -> Coverage:
    """Coverage of ``backend`` over the zoo models and the ONNX node tests (either may be left out)."""
    coverage = Coverage(backend.info().name)
    partial = claims_part_of_the_core(backend)
    for name, build in MODELS.items() if models else ():
        model = build()
        missing = missing_needs(needs_of(model, backend), backend)
        if coverage.count(missing):
            coverage.models_runnable.append(name)
        else:
            coverage.models_blocked[name] = missing
        if partial:
            coverage.shares[name] = share_beside_catch_all(model, backend)
    if node_tests:
        check_node_tests(coverage, backend, limit)
    return coverage
