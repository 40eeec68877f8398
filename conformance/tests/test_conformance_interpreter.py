"""The suite on the reference backend: every primitive case passes; ONNX and model figures.

The ONNX layer runs on a deterministic subset here (selected by id pattern); the whole
suite, every node test and ResNet-50 included, runs once in the test marked slow.
"""

from __future__ import annotations

import json
import time

import pytest
from glow_conformance.cli import main
from glow_conformance.models_layer import has_onnxruntime
from glow_conformance.onnx_data import load_node_tests
from glow_conformance.results import Outcome
from glow_conformance.suite import SuiteOptions, plan, run_plan

from glow_core.model_zoo import LARGE_MODELS

ONNX_SUBSET = (
    "onnx:test_add*",
    "onnx:test_relu*",
    "onnx:test_matmul_2d",
    "onnx:test_softmax_axis_0*",
    "onnx:test_regex_full_match_basic",
    "onnx:test_sequence_insert_at_back",
    "onnx:test_bernoulli",
    "onnx:test_cast_FLOAT_to_FLOAT8E4M3FN",
)


def _not_passed(results):
    return [(r.id, r.outcome.value, r.message) for r in results if r.outcome is not Outcome.PASSED]


def test_every_primitive_case_passes_on_the_interpreter(registry):
    board = run_plan(plan("interpreter", SuiteOptions(layers=("primitives",))))
    results = board.layers["primitives"]
    assert len(results) > 1000
    assert not _not_passed(results)


def test_onnx_subset_on_the_interpreter(registry):
    board = run_plan(plan("interpreter", SuiteOptions(layers=("onnx",), select=ONNX_SUBSET)))
    results = {r.id: r for r in board.layers["onnx"]}
    for passing in ("test_add", "test_add_bcast", "test_relu", "test_matmul_2d", "test_softmax_axis_0"):
        assert results[f"onnx:{passing}"].outcome is Outcome.PASSED, results[f"onnx:{passing}"]
    # Strings run in the Session's host partition; sequences are lists of tensors at load time.
    assert results["onnx:test_regex_full_match_basic"].outcome is Outcome.PASSED
    assert results["onnx:test_sequence_insert_at_back"].outcome is Outcome.PASSED
    random = results["onnx:test_bernoulli"]  # random draws have no reproducible expected values
    assert random.outcome is Outcome.UNSUPPORTED and random.message.startswith("UnsupportedOpError")
    assert results["onnx:test_add_uint8"].outcome is Outcome.PASSED
    assert results["onnx:test_cast_FLOAT_to_FLOAT8E4M3FN"].outcome is Outcome.PASSED  # a narrow kind
    # An expanded test (the op's function body) counts under the op it expands.
    assert results["onnx:test_softmax_axis_0_expanded"].group == "Softmax"


@pytest.mark.skipif(not has_onnxruntime(), reason="onnxruntime is not installed")
def test_models_match_onnxruntime_on_the_interpreter(registry):
    board = run_plan(plan("interpreter", SuiteOptions(layers=("models",))))
    results = {r.id: r for r in board.layers["models"]}
    large = {f"model:{name}[b1]" for name in LARGE_MODELS}
    for case_id in large:  # slow: only with --slow
        assert results[case_id].outcome is Outcome.SKIPPED and "--slow" in results[case_id].message
    assert not [p for p in _not_passed(board.layers["models"]) if p[0] not in large]


def test_all_backends_side_by_side_with_the_references(registry, tmp_path, capsys):
    argv = ["--all", "--layers", "primitives,onnx", "--select", "Add[*", "--select", "onnx:test_add*"]
    assert main([*argv, "--report", str(tmp_path)]) == 1  # wrong-add is among the backends
    markdown = (tmp_path / "scoreboard.md").read_text()
    columns = (
        "| layer | bad-xfails | drops-fused-activation | ignores-predicates | interpreter | overclaiming "
        "| small | wrong-add | wrong-matmul |"
    )
    assert (
        columns + (" onnxruntime | onnx.reference |" if has_onnxruntime() else " onnx.reference |")
        in markdown
    )
    assert (tmp_path / "interpreter" / "scoreboard.md").is_file()
    data = json.loads((tmp_path / "scoreboard.json").read_text())
    assert data["onnx.reference"]["role"] == "reference"
    assert data["onnx.reference"]["layers"]["onnx"]["counts"]["passed"] >= 2


@pytest.mark.slow
def test_full_run_on_the_interpreter(registry, tmp_path, capsys):
    """All four layers, every node test and ResNet-50: the figures docs/conformance.md quotes."""
    start = time.perf_counter()
    status = main(["--backend", "interpreter", "--slow", "--report", str(tmp_path)])
    seconds = time.perf_counter() - start
    data = json.loads((tmp_path / "scoreboard.json").read_text())
    counts = {name: layer["counts"] for name, layer in data["layers"].items()}
    with capsys.disabled():
        print(f"\nfull interpreter run: {seconds:.1f} s, exit {status}, {json.dumps(counts)}")
    assert status == 0 and data["verdict"] == "PASS"  # the reference passes its own suite
    assert sum(counts["onnx"].values()) == len(load_node_tests())
    assert counts["primitives"]["passed"] == sum(counts["primitives"].values())
    if has_onnxruntime():
        assert counts["models"]["passed"] == sum(counts["models"].values())
        assert counts["partitions"]["passed"] == sum(counts["partitions"].values())
