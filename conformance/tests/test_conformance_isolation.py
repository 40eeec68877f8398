"""An honest verdict: planted bugs are caught in every case, a crashing or hanging kernel costs
its own case only, and a run that checked nothing (or not every layer) is not a PASS."""

from __future__ import annotations

import types

import numpy as np
import pytest
from conformance_fakes import CRASH_SHAPE, MUTANTS, MUTATED_FAMILIES
from glow_conformance.cli import main
from glow_conformance.compare import check_onnx_outputs, noise_floor
from glow_conformance.primitives_layer import OpCase
from glow_conformance.results import Outcome, RunVerdict
from glow_conformance.suite import SuiteOptions, plan, run_plan

from glow_core.spec import OpSpec

PRIMITIVES_ONLY = SuiteOptions(layers=("primitives",))


def _op_case_ids(name: str, kind: str) -> set[str]:
    return {c.id for c in plan(name, PRIMITIVES_ONLY).cases if isinstance(c, OpCase) and c.kind == kind}


def test_one_mutant_per_primitive_family():
    import glow_core.primitives as package

    families = {
        name: {k for k, v in vars(module).items() if isinstance(v, OpSpec)}
        for name, module in vars(package).items()
        if isinstance(module, types.ModuleType) and module.__name__.startswith(package.__name__ + ".")
    }
    families = {name: kinds for name, kinds in families.items() if kinds}
    assert len(families) >= 9 and set(families) == set(MUTATED_FAMILIES.values())
    assert all(kind in families[family] for kind, family in MUTATED_FAMILIES.items())


@pytest.mark.parametrize("backend", MUTANTS, ids=lambda cls: cls.name)
def test_a_planted_bug_is_caught_in_every_case_of_its_kind(more_fakes, backend):
    kind = next(iter(backend.claims))
    board = run_plan(plan(backend.name, PRIMITIVES_ONLY))
    failing = {r.id for r in board.layers["primitives"] if r.outcome is Outcome.FAILED}
    expected = _op_case_ids(backend.name, kind)
    # Every case fails but special-value ones whose last element hides the bug (NaN + 1 is NaN).
    assert expected and failing <= expected
    assert all("-values=" in i for i in expected - failing), expected - failing
    assert board.verdict is RunVerdict.FAIL


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_crashing_kernel_is_reported_by_id_and_the_run_goes_on(more_fakes, jobs):
    board = run_plan(plan("crashing-add", PRIMITIVES_ONLY), jobs=jobs)
    results = {r.id: r for r in board.layers["primitives"]}
    crash_id = "Add[float32-{}_{}]".format(*("x".join(map(str, CRASH_SHAPE)),) * 2)
    crashed = {i for i, r in results.items() if r.outcome is Outcome.CRASHED}
    assert crashed == {crash_id}
    assert "SIGSEGV" in results[crash_id].message
    # Every other case ran, in a fresh worker after the crash, and passed.
    assert all(r.outcome is Outcome.PASSED for i, r in results.items() if i != crash_id)
    assert len(results) > 100


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_hanging_kernel_times_out_by_id_and_the_run_goes_on(more_fakes, capsys, jobs):
    argv = ["--backend", "hanging-matmul", "--layers", "primitives", "--timeout", "3", "--jobs", jobs]
    status = main(argv)
    out = capsys.readouterr().out
    assert status == 1
    assert "timeout  MatMul[float32-8x6_6x10]: still running after 3 s" in out
    assert out.count("timeout  ") == 1  # the other MatMul and Sub cases ran and passed


def test_a_declared_crash_is_xfailed(more_fakes, monkeypatch):
    from conformance_fakes import CrashingAdd

    monkeypatch.setattr(CrashingAdd, "xfail", {"Add[float32-5x1x3_5x1x3]": "driver bug 12"})
    board = run_plan(plan("crashing-add", PRIMITIVES_ONLY))
    result = next(r for r in board.layers["primitives"] if r.id == "Add[float32-5x1x3_5x1x3]")
    assert result.outcome is Outcome.XFAILED and result.message.startswith("driver bug 12; got:")
    assert board.verdict is RunVerdict.PASS


def test_nothing_selected_is_not_a_pass(registry, capsys):
    assert main(["--backend", "small", "--select", "NoSuchKind[*"]) == 5
    out = capsys.readouterr().out
    assert "no case matches NoSuchKind[*" in out and "NO CASES" in out


def test_a_layer_that_could_not_run_is_not_a_pass(registry, monkeypatch, capsys):
    from glow_conformance import models_layer

    monkeypatch.setattr(models_layer, "has_onnxruntime", lambda: False)
    argv = [
        "--backend",
        "small",
        "--layers",
        "primitives,models",
        "--select",
        "Add[*",
        "--select",
        "model:mlp*",
    ]
    assert main(argv) == 4
    out = capsys.readouterr().out
    assert "INCOMPLETE (models layer not run: onnxruntime" in out


def test_the_in_process_runner_gives_the_same_results(registry):
    options = SuiteOptions(layers=("primitives",), select=("Add[*",))
    isolated = run_plan(plan("wrong-add", options))
    in_process = run_plan(plan("wrong-add", options), isolate=False)
    assert [(r.id, r.outcome) for r in isolated.layers["primitives"]] == [
        (r.id, r.outcome) for r in in_process.layers["primitives"]
    ]


def test_parallel_workers_give_the_in_process_results_in_plan_order(registry):
    options = SuiteOptions(layers=("primitives",), select=("Add[*", "Sub[*"))
    parallel = run_plan(plan("wrong-add", options), jobs=3)
    in_process = run_plan(plan("wrong-add", options), isolate=False)
    assert [(r.id, r.outcome) for r in parallel.layers["primitives"]] == [
        (r.id, r.outcome) for r in in_process.layers["primitives"]
    ]
    assert {r.outcome for r in parallel.layers["primitives"]} == {Outcome.PASSED, Outcome.FAILED}


def test_jobs_must_be_positive(registry, capsys):
    assert main(["--backend", "small", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err


def test_stored_float32_noise_is_tolerated_and_real_errors_are_not():
    want = np.array([54.0, -20.0, 1.9073486e-06, 3.0], np.float32)  # exact value of [2] is 0
    exact = np.array([54.0, -20.0, 0.0, 3.0], np.float32)
    assert noise_floor(want, float(np.finfo(np.float32).eps)) == pytest.approx(4 * 1.1920929e-07 * 54)
    assert check_onnx_outputs([exact], [want], 1e-3, 1e-7).outcome is Outcome.PASSED
    wrong = exact.copy()
    wrong[2] = 1e-4  # 3.9 float32 ulps... of 54 would be 2.6e-5: this is four times more
    assert check_onnx_outputs([wrong], [want], 1e-3, 1e-7).outcome is Outcome.FAILED
    # Half and narrower kinds get no floor: four of their ulps are percents of the scale.
    assert noise_floor(want.astype(np.float16), 1e-3) == 0.0


def test_dft_inverse_passes_on_the_interpreter(registry):
    options = SuiteOptions(layers=("onnx",), select=("onnx:test_dft_inverse*",))
    board = run_plan(plan("interpreter", options))
    assert {r.id: r.outcome for r in board.layers["onnx"]} == {
        "onnx:test_dft_inverse": Outcome.PASSED,
        "onnx:test_dft_inverse_opset19": Outcome.PASSED,
    }
