"""Conformance cases for kept high-level nodes: generated from each node's declared examples
(as for primitives), checked against the node's lowering run with the primitives' references,
so a backend's fused kernel for a node it keeps is held to the node's semantics."""

from __future__ import annotations

import pytest
from fake_plugins import plugin_module
from glow_conformance.primitives_layer import OpCase
from glow_conformance.results import Outcome, Scoreboard
from glow_conformance.suite import SuiteOptions, plan, run_plan
from kept_node_fakes import KEPT_NODE_FAKES

from glow_core.spec import NODES

NODE_CASES = SuiteOptions(layers=("primitives",), select=tuple(f"{kind}[*" for kind in NODES))
"""The primitives layer, only its cases of high-level node kinds."""


@pytest.fixture
def kept_node_fakes(registry):
    for cls in KEPT_NODE_FAKES:
        record = registry.register(plugin_module(cls), cls.name)
        assert record.error is None, record.error
    return registry


def _run(name: str) -> Scoreboard:
    return run_plan(plan(name, NODE_CASES), isolate=False)


def _op_cases(name: str, kind: str) -> set[str]:
    return {c.id for c in plan(name, NODE_CASES).cases if isinstance(c, OpCase) and c.kind == kind}


def test_every_node_kind_gets_cases_from_its_examples_and_the_reference_passes(kept_node_fakes):
    """Each node kind a backend keeps has cases (its examples, retyped and rescaled); the
    interpreter keeping all of them passes every one."""
    board = _run("keeps-every-node")
    results = board.layers["primitives"]
    for kind in NODES:
        # float32 cases, or the kinds a node is declared for (the integer layers: int8, uint8)
        assert any(r.id.startswith(f"{kind}[") for r in results), f"no case for {kind}"
    assert {"Gelu[float32-3x4]", "Attention[float32-1x2x5x4_1x2x6x4_1x2x6x3]"} <= {r.id for r in results}
    problems = [(r.id, r.message) for r in results if r.outcome is not Outcome.PASSED]
    assert not problems and board.ok


def test_a_wrong_kept_gelu_kernel_fails_exactly_its_own_cases(kept_node_fakes):
    """A Gelu kernel off by 0.01 fails every Gelu case, named by id; the kept LayerNorm passes."""
    board = _run("wrong-gelu")
    failing = {r.id for r in board.layers["primitives"] if r.outcome is Outcome.FAILED}
    gelu_cases = _op_cases("wrong-gelu", "Gelu")
    assert "Gelu[float32-3x4]" in failing
    assert failing == gelu_cases and _op_cases("wrong-gelu", "LayerNorm")
    result = next(r for r in board.layers["primitives"] if r.id == "Gelu[float32-3x4]")
    assert "relative error" in result.message
    assert not board.ok
