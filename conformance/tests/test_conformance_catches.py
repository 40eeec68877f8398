"""The suite can fail: wrong backends are caught, exactly, by their stable case ids."""

from __future__ import annotations

import json

import pytest
from glow_conformance.primitives_layer import OpCase
from glow_conformance.results import Outcome, Scoreboard
from glow_conformance.suite import SuiteOptions, plan, run_plan

PRIMITIVES_ONLY = SuiteOptions(layers=("primitives",))


def _run(name: str) -> Scoreboard:
    return run_plan(plan(name, PRIMITIVES_ONLY))


def _ids(board: Scoreboard, *outcomes: Outcome) -> set[str]:
    return {r.id for r in board.layers["primitives"] if r.outcome in outcomes}


def _op_case_ids(name: str, kind: str) -> set[str]:
    return {c.id for c in plan(name, PRIMITIVES_ONLY).cases if isinstance(c, OpCase) and c.kind == kind}


def test_the_correct_small_backend_passes(registry):
    board = _run("small")
    assert board.ok, [
        (r.id, r.message) for r in board.layers["primitives"] if r.outcome is not Outcome.PASSED
    ]


@pytest.mark.parametrize(("backend", "kind"), [("wrong-add", "Add"), ("wrong-matmul", "MatMul")])
def test_a_wrong_primitive_fails_exactly_its_own_cases(registry, backend, kind):
    board = _run(backend)
    failing = _ids(board, Outcome.FAILED, Outcome.ERROR, Outcome.XPASSED)
    ids = _op_case_ids(backend, kind)
    # Every case of the kind fails but special-value ones whose draw hides the bug (a last
    # row of planted zeros is zero whichever way the kernel computes it).
    assert failing <= ids and all("-values=" in i for i in ids - failing)
    assert f"{kind}[float32-4x3_3x5]" in failing or f"{kind}[float32-4x5_4x5]" in failing
    assert not board.ok


def test_failure_messages_say_where(registry):
    board = _run("wrong-matmul")
    result = next(r for r in board.layers["primitives"] if r.id == "MatMul[float32-4x3_3x5]")
    assert "relative error" in result.message and "worst at [3," in result.message


def test_a_claim_nothing_can_check_fails(registry):
    board = _run("overclaiming")
    results = {r.id: r for r in board.layers["primitives"]}
    assert results["MatMul[int8]"].outcome is Outcome.FAILED
    assert "only for" in results["MatMul[int8]"].message
    assert results["Frobnicate[float32]"].outcome is Outcome.FAILED
    assert "no operator named 'Frobnicate'" in results["Frobnicate[float32]"].message
    assert results["MatMul[float32]"].outcome is Outcome.PASSED
    assert _ids(board, Outcome.FAILED) == {"MatMul[int8]", "Frobnicate[float32]"}


def test_a_claim_whose_cases_are_all_xfailed_fails(registry, monkeypatch):
    from conformance_fakes import SmallInterpreter

    every = {i: "not done" for i in _op_case_ids("small", "Transpose") if "[float16-" in i}
    monkeypatch.setattr(SmallInterpreter, "xfail", every)
    board = _run("small")
    claim = next(r for r in board.layers["primitives"] if r.id == "Transpose[float16]")
    assert claim.outcome is Outcome.FAILED and "every case" in claim.message
    # The declared cases pass on the interpreter, so each one is reported as an xpass.
    assert _ids(board, Outcome.XPASSED) == set(every)


def test_a_passing_xfail_and_an_unknown_xfail_id_fail_the_run(registry):
    board = _run("bad-xfails")
    results = {r.id: r for r in board.layers["primitives"]}
    assert results["Add[float32-4x5_4x5]"].outcome is Outcome.XPASSED
    assert "remove the declaration" in results["Add[float32-4x5_4x5]"].message
    assert results["Add[float32-99x99_99x99]"].outcome is Outcome.ERROR
    assert "matches no generated case" in results["Add[float32-99x99_99x99]"].message
    assert _ids(board, Outcome.FAILED, Outcome.XPASSED, Outcome.ERROR) == {
        "Add[float32-4x5_4x5]",
        "Add[float32-99x99_99x99]",
    }


def test_a_declared_failure_is_xfailed_not_failed(registry, monkeypatch):
    from conformance_fakes import WrongAdd

    monkeypatch.setattr(WrongAdd, "xfail", {"Add[float32-4x5_4x5]": "sign bug, issue 7"})
    board = _run("wrong-add")
    result = next(r for r in board.layers["primitives"] if r.id == "Add[float32-4x5_4x5]")
    assert result.outcome is Outcome.XFAILED and result.message.startswith("sign bug, issue 7; got:")


def test_cli_exit_status_and_report(registry, tmp_path, capsys):
    from glow_conformance.cli import main

    assert main(["--backend", "small", "--layers", "primitives"]) == 0
    assert main(["--backend", "wrong-add", "--layers", "primitives", "--report", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "failed   Add[bfloat16-4x5_4x5]: relative error" in out  # the first of them
    data = json.loads((tmp_path / "scoreboard.json").read_text())
    problems = {p["id"] for p in data["layers"]["primitives"]["problems"]}
    assert problems == _op_case_ids("wrong-add", "Add")
    assert data["ok"] is False and data["layers"]["primitives"]["counts"]["failed"] == len(problems)
    markdown = (tmp_path / "scoreboard.md").read_text()
    assert "**FAIL**: wrong-add" in markdown
    claims = len(registry.get("wrong-add").info().supports["Add"])
    assert f"| Add | {claims} | {len(problems)} |" in markdown  # each claim passes, every case fails
    assert "- `Add[float32-4x5_4x5]` **failed**: relative error" in markdown


def test_cli_usage_errors_exit_2(registry, capsys):
    from glow_conformance.cli import main

    assert main(["--backend", "no-such-backend"]) == 2
    assert main(["--backend", "small", "--layers", "primitives,widgets"]) == 2
    err = capsys.readouterr().err
    assert "no backend named 'no-such-backend'" in err and "unknown conformance layer" in err


def test_pytest_plugin_reports_the_same_failures(registry, pytester, tmp_path):
    expected = _op_case_ids("wrong-add", "Add")
    # In-process, the plugin is already loaded through its pytest11 entry point (no -p needed).
    result = pytester.runpytest_inprocess(
        "--glow-backend",
        "wrong-add",
        "--glow-layers",
        "primitives",
        "--glow-report",
        str(tmp_path),
        "-q",
    )
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == len(expected)
    result.stdout.fnmatch_lines(["FAILED *glow-conformance/primitives::Add[[]float32-4x5_4x5[]]*"])
    data = json.loads((tmp_path / "scoreboard.json").read_text())
    assert {p["id"] for p in data["layers"]["primitives"]["problems"]} == expected


def test_pytest_plugin_is_passive_without_a_backend(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("-q")
    result.assert_outcomes(passed=1)


def test_a_backend_that_ignores_predicates_fails_the_predicated_off_case(registry):
    board = _run("ignores-predicates")
    results = {r.id: r for r in board.layers["primitives"]}
    assert results["predication[true]"].outcome is Outcome.PASSED
    assert results["predication[false]"].outcome is Outcome.FAILED
    assert "must be skipped" in results["predication[false]"].message


def test_a_kernel_that_drops_its_fused_activation_fails_exactly_those_cases(registry):
    board = _run("drops-fused-activation")
    failing = _ids(board, Outcome.FAILED)
    cases = plan("drops-fused-activation", PRIMITIVES_ONLY).cases
    fused = {c.id: c for c in cases if isinstance(c, OpCase) and "activation=relu" in c.id}
    assert fused and failing <= set(fused)
    # A dropped Relu shows wherever the output holds a negative value: in every case but the
    # tiniest outputs (a layer's shape shrunk to 2x1 may draw two positive sums).
    big = {i for i, c in fused.items() if c.types[0].shape[0] * c.types[1].shape[1] >= 6}
    assert big <= failing and len(big) > len(fused) / 2
