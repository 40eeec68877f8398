"""The ONNX pass-rate table: counted over all cases and over onnxruntime's opsets, written
into a docs page between markers by ``glow conformance --docs``."""

from __future__ import annotations

import onnx
import pytest
from glow_conformance.cli import main
from glow_conformance.models_layer import has_onnxruntime
from glow_conformance.opsets import OpsetScope, default_opset, onnxruntime_opset
from glow_conformance.report import markdown
from glow_conformance.results import CaseResult, Outcome, Scoreboard
from glow_conformance.side_by_side import (
    DOCS_END,
    DOCS_START,
    comparison_markdown,
    pass_rate_table,
    write_docs,
)
from onnx import helper

from glow_core.errors import GlowError


def _board(target: str, outcomes: dict[str, Outcome]) -> Scoreboard:
    board = Scoreboard(
        target, {"version": "9.9", "date": "2030-01-01 00:00 UTC", "versions": {"onnx": "1.0"}}
    )
    for case_id, outcome in outcomes.items():
        board.add(CaseResult(case_id, "onnx", "Op", outcome, "" if outcome is Outcome.PASSED else "why"))
    return board


SCOPE = OpsetScope(20, {"onnx:test_old": 13, "onnx:test_new": 22, "onnx:test_ml": None, "onnx:test_mid": 20})


def test_pass_rates_count_all_cases_and_those_of_onnxruntimes_opsets() -> None:
    p, u, f = Outcome.PASSED, Outcome.UNSUPPORTED, Outcome.FAILED
    glow = _board(
        "interpreter", {"onnx:test_old": p, "onnx:test_new": p, "onnx:test_ml": u, "onnx:test_mid": p}
    )
    ort = _board(
        "onnxruntime", {"onnx:test_old": p, "onnx:test_new": u, "onnx:test_ml": p, "onnx:test_mid": f}
    )
    rows = pass_rate_table([glow, ort], SCOPE)
    # test_new (opset 22) is beyond onnxruntime's 20; test_ml imports no default opset and counts.
    assert rows[0] == "| target | version | all 4 cases | 3 cases of opsets onnxruntime loads (<= 20) |"
    assert "| interpreter | 9.9 | 3 (75.0%) | 2 (66.7%) |" in rows
    assert "| onnxruntime | 9.9 | 2 (50.0%) | 2 (66.7%) |" in rows
    assert "## ONNX node tests passed" in comparison_markdown([glow, ort], SCOPE)


def test_without_onnxruntime_only_the_all_cases_column() -> None:
    board = _board("interpreter", {"onnx:test_old": Outcome.PASSED})
    rows = pass_rate_table([board], OpsetScope(None, {"onnx:test_old": 13}))
    assert rows[0] == "| target | version | all 1 cases |"
    assert SCOPE.within("onnx:test_unknown")  # no opset known: nothing to exceed


def test_every_unsupported_case_is_listed_with_its_reason() -> None:
    board = _board("interpreter", {f"onnx:test_{i}": Outcome.UNSUPPORTED for i in range(3)})
    text = markdown(board)
    assert "Every unsupported or skipped case (3)" in text
    assert all(f"- `onnx:test_{i}` **unsupported**: why" in text for i in range(3))


def test_write_docs_replaces_only_between_the_markers(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nbefore\n{DOCS_START}\nold table\n{DOCS_END}\nafter\n", encoding="utf-8")
    write_docs(page, "new table")
    assert (
        page.read_text(encoding="utf-8") == f"# Title\n\nbefore\n{DOCS_START}\nnew table\n{DOCS_END}\nafter\n"
    )
    write_docs(page, "newer")  # idempotent shape: a second write replaces the first
    assert page.read_text(encoding="utf-8").count(DOCS_START) == 1
    assert "newer" in page.read_text(encoding="utf-8")


def test_write_docs_needs_the_markers(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text("no markers here\n", encoding="utf-8")
    with pytest.raises(GlowError, match=r"has no <!-- onnx-pass-rates:start --> .* markers"):
        write_docs(page, "table")
    with pytest.raises(GlowError, match="cannot read the docs page"):
        write_docs(tmp_path / "missing.md", "table")


def test_default_opset_of_a_model() -> None:
    graph = helper.make_graph([], "g", [], [])
    assert default_opset(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])) == 17
    ml_only = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    assert default_opset(ml_only) is None


@pytest.mark.skipif(not has_onnxruntime(), reason="needs onnxruntime")
def test_onnxruntime_opset_is_the_newest_it_loads() -> None:
    newest = onnxruntime_opset()
    assert newest is not None and 7 <= newest <= onnx.defs.onnx_opset_version()
    assert onnxruntime_opset() is newest  # asked once per process


def test_cli_docs_writes_the_table_with_date_and_versions(registry, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "onnx-support.md"
    page.write_text(f"intro\n{DOCS_START}\n{DOCS_END}\n", encoding="utf-8")
    argv = [
        "--backend",
        "interpreter",
        "--layers",
        "onnx",
        "--select",
        "onnx:test_add_bcast",
        "--docs",
        str(page),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "ONNX node tests passed:" in printed
    text = page.read_text(encoding="utf-8")
    words = " ".join(text.split())  # the description is wrapped at 100 columns
    assert "| interpreter | 0.1.0 | 1 (100.0%) |" in text
    assert "onnx.reference" in text  # the references run for the table
    assert f"onnx {onnx.__version__}" in words and "Measured 20" in words
    # The command is written as a reader types it: no path of this machine.
    assert "--docs onnx-support.md`" in words and str(tmp_path) not in words


def test_cli_docs_refuses_early(registry, tmp_path, capsys) -> None:
    page = tmp_path / "page.md"
    page.write_text("no markers\n", encoding="utf-8")
    assert main(["--backend", "interpreter", "--layers", "onnx", "--docs", str(page)]) == 2
    assert "markers" in capsys.readouterr().err
    assert main(["--backend", "interpreter", "--layers", "primitives", "--docs", str(page)]) == 2
    assert "include the onnx layer" in capsys.readouterr().err
