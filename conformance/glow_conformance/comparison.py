"""The side-by-side scoreboard of ``glow conformance --all``: every backend, plus references.

onnxruntime and ``onnx.reference`` run the same ONNX node tests, counted the same way, so a
backend's column can be read against what the established runtimes manage on the same cases.
"""

from __future__ import annotations

import json
from pathlib import Path

from glow_conformance.report import JSON_NAME, MD_NAME, headline, table, write_reports
from glow_conformance.results import CaseResult, Outcome, Scoreboard, by_group, count

_NOTED = (
    Outcome.FAILED,
    Outcome.XPASSED,
    Outcome.ERROR,
    Outcome.UNSUPPORTED,
    Outcome.XFAILED,
    Outcome.SKIPPED,
)


def cell(results: list[CaseResult] | None) -> str:
    """``passed/total`` and the other outcomes that occurred, e.g. ``521/1884, 5 failed``."""
    if not results:
        return "-"
    counts = count(results)
    notes = [f"{counts[o]} {o.value}" for o in _NOTED if counts[o]]
    return ", ".join([f"{counts[Outcome.PASSED]}/{len(results)}", *notes])


def comparison_markdown(boards: list[Scoreboard]) -> str:
    names = [b.target for b in boards]
    lines = ["# glow conformance: all backends", ""]
    lines += [f"- {headline(b)}" for b in boards]
    layers = list(dict.fromkeys(layer for b in boards for layer in b.layers))
    lines += [
        "",
        *table(
            ["layer", *names], [[layer, *(cell(b.layers.get(layer)) for b in boards)] for layer in layers]
        ),
    ]
    for layer in layers:
        groups = sorted({r.group for b in boards for r in b.layers.get(layer, [])})
        per_target = [by_group(b.layers.get(layer, [])) for b in boards]
        rows = [[g, *(cell(t.get(g)) for t in per_target)] for g in groups]
        lines += ["", f"## {layer}", "", *table(["group", *names], rows)]
    return "\n".join(lines) + "\n"


def write_comparison(boards: list[Scoreboard], directory: str | Path) -> list[Path]:
    """One report per target in ``DIR/<target>/``, and the side-by-side one in ``DIR``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for board in boards:
        written += write_reports(board, out / board.target)
    json_path, md_path = out / JSON_NAME, out / MD_NAME
    summary = {b.target: b.to_dict() for b in boards}
    json_path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    md_path.write_text(comparison_markdown(boards), encoding="utf-8")
    return [*written, json_path, md_path]
