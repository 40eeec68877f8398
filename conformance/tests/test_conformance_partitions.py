"""The partitions layer: zoo models split between a backend and the interpreter, twice each,
against onnxruntime; backends handing over stale or missing boundary tensors are caught by id."""

from __future__ import annotations

import pytest
from fake_plugins import plugin_module
from glow_conformance import partitions_layer
from glow_conformance.case import layer_of, parse_layers
from glow_conformance.models_layer import slow_reason
from glow_conformance.results import Outcome, RunVerdict, Scoreboard
from glow_conformance.suite import SuiteOptions, plan, run_plan
from partition_fakes import PARTITION_FAKES

from glow_core.model_zoo import MODELS
from glow_core.plugins import BackendRegistry

PARTITIONS = SuiteOptions(layers=("partitions",))

SMALL = ("small_cnn", "transformer_encoder")
"""A chain of layers (one tensor crosses each cut), and an encoder whose residual connections
make its first alternating partition write two tensors."""

SMALL_SELECTION = SuiteOptions(
    layers=("models", "partitions"),
    select=tuple(f"model:{m}?b1?" for m in SMALL) + tuple(f"partition:{m}?*" for m in SMALL),
)


@pytest.fixture
def partition_fakes(registry: BackendRegistry) -> BackendRegistry:
    for cls in PARTITION_FAKES:
        record = registry.register(plugin_module(cls), cls.name)
        assert record.error is None, record.error
    return registry


def _outcomes(board: Scoreboard, layer: str) -> dict[str, Outcome]:
    return {r.id: r.outcome for r in board.layers[layer]}


def test_the_layer_has_two_cases_per_zoo_model_and_reads_its_ids():
    ids = {c.id for c in partitions_layer.generate()}
    assert ids == {f"partition:{m}[{v}]" for m in MODELS for v in ("reference", "alternating")}
    assert all(layer_of(i) == "partitions" for i in ids)
    assert parse_layers("partitions,models") == ("models", "partitions")


@pytest.mark.slow
def test_every_model_passes_split_between_the_interpreter_and_itself(registry):
    board = run_plan(plan("interpreter", PARTITIONS))
    outcomes = _outcomes(board, "partitions")
    slow = {i for i in outcomes if slow_reason(i.split(":")[1].split("[")[0])}
    assert slow and {i for i, o in outcomes.items() if o is Outcome.SKIPPED} == slow
    assert {i for i, o in outcomes.items() if o is Outcome.PASSED} == set(outcomes) - slow
    assert board.verdict is RunVerdict.PASS


@pytest.mark.slow
def test_every_model_passes_split_between_cpu_and_the_interpreter(registry):
    import glow_cpu.plugin

    registry.register(glow_cpu.plugin, "cpu")
    board = run_plan(plan("cpu", PARTITIONS))
    assert board.verdict is RunVerdict.PASS, [(r.id, r.message) for r in board.problems()]
    assert sum(o is Outcome.PASSED for o in _outcomes(board, "partitions").values()) == 2 * len(
        [m for m in MODELS if not slow_reason(m)]
    )


def test_a_partition_returning_its_first_result_again_is_caught_by_id(partition_fakes):
    board = run_plan(plan("stale-outputs", SMALL_SELECTION))
    # One run of one whole-model function cannot tell: the models layer passes...
    assert set(_outcomes(board, "models").values()) == {Outcome.PASSED}
    # ...the second run of every split model returns the first run's tensors.
    results = {r.id: r for r in board.layers["partitions"]}
    assert {i for i, r in results.items() if r.outcome is Outcome.FAILED} == {
        f"partition:{m}[{v}]" for m in SMALL for v in ("reference", "alternating")
    }
    message = results["partition:transformer_encoder[alternating]"].message
    assert message.startswith("run 2 of 2: max relative error") and "the first run matched" in message
    assert "stale-outputs" in message and "interpreter" in message  # the partition summary
    assert board.verdict is RunVerdict.FAIL


def test_a_partition_that_drops_a_boundary_tensor_is_caught_by_id(partition_fakes):
    board = run_plan(plan("drops-outputs", SMALL_SELECTION))
    assert set(_outcomes(board, "models").values()) == {Outcome.PASSED}
    results = {r.id: r for r in board.layers["partitions"]}
    # Only the encoder's alternation has a partition of the fake writing two tensors; a chain
    # hands one tensor over per cut, and one partition returns one output, which it keeps.
    assert {i for i, r in results.items() if r.outcome is not Outcome.PASSED} == {
        "partition:transformer_encoder[alternating]"
    }
    message = results["partition:transformer_encoder[alternating]"].message
    assert message.startswith("run 1 crashed: BackendError: partition ")
    assert "on 'drops-outputs' returned no '" in message


def test_without_onnxruntime_the_layer_is_skipped_and_the_run_incomplete(registry, monkeypatch):
    monkeypatch.setattr(partitions_layer, "has_onnxruntime", lambda: False)
    board = run_plan(plan("interpreter", PARTITIONS), isolate=False)
    assert {r.outcome for r in board.layers["partitions"]} == {Outcome.SKIPPED}
    assert "onnxruntime" in board.layers["partitions"][0].message
    assert board.verdict is RunVerdict.INCOMPLETE
