"""Writing one target's scoreboard: ``scoreboard.json`` for tools, ``scoreboard.md`` for people.

The JSON holds every case that did not pass with its message (and the ids that passed); the
Markdown holds a table per layer (per op kind, per ONNX op type, per model), then the
problems: each failure with its message, and unsupported cases grouped by reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from glow_conformance.results import BAD_OUTCOMES, COLUMNS, CaseResult, Outcome, Scoreboard, by_group, count

JSON_NAME = "scoreboard.json"
MD_NAME = "scoreboard.md"
GROUP_TITLES = {
    "primitives": "operator kind",
    "onnx": "ONNX op type",
    "models": "model",
    "partitions": "model",
}
MAX_REASON = 160


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; columns holding only numbers are right-aligned."""
    numeric = [bool(rows) and all(r[i].isdigit() for r in rows) for i in range(len(header))]
    align = ["---:" if n else "---" for n in numeric]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _cell(text: str) -> str:
    short = text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."
    return short.replace("|", "\\|")


def summary_rows(board: Scoreboard) -> list[list[str]]:
    """One row per layer: its outcome counts."""
    return [[name, *(str(count(rs)[o]) for o in COLUMNS)] for name, rs in board.layers.items()]


def headline(board: Scoreboard) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in board.meta.get("versions", {}).items())
    verdict = board.verdict.value
    not_run = "".join(f" ({layer} layer not run: {why})" for layer, why in board.layers_not_run().items())
    when = board.meta.get("date", "?")
    return (
        f"**{verdict}**{not_run}: {board.target} {board.meta.get('version', '')} on {when}, "
        f"{board.seconds:.1f} s ({versions})"
    )


def markdown(board: Scoreboard) -> str:
    lines = [f"# glow conformance: {board.target}", "", headline(board), ""]
    lines += table(["layer", *COLUMNS], summary_rows(board))
    for name, results in board.layers.items():
        lines += ["", f"## {name}", ""]
        lines += _group_table(name, results)
        lines += _problems(results)
    return "\n".join(lines) + "\n"


def _group_table(layer: str, results: list[CaseResult]) -> list[str]:
    used = [o for o in COLUMNS if any(r.outcome is o for r in results)]
    header = [GROUP_TITLES.get(layer, "group"), *used]
    rows = []
    for group, members in by_group(results).items():
        counts = count(members)
        rows.append([group, *(str(counts[o]) for o in used)])
    return table(header, rows)


def _problems(results: list[CaseResult]) -> list[str]:
    lines = []
    bad = [r for r in results if r.outcome in BAD_OUTCOMES or r.outcome is Outcome.XFAILED]
    if bad:
        lines += ["", "### Failures, errors and xfails", ""]
        lines += [f"- `{r.id}` **{r.outcome.value}**: {_cell(r.message)}" for r in bad]
    # Unsupported messages name nodes and opsets, so they are summarized per group (the JSON
    # keeps every one): how many, and the first reason.
    refused = [r for r in results if r.outcome in (Outcome.UNSUPPORTED, Outcome.SKIPPED)]
    if refused:
        lines += ["", "### Unsupported and skipped, per group (first reason)", ""]
        rows = [[g, str(len(rs)), _cell(rs[0].message)] for g, rs in by_group(refused).items()]
        lines += table(["group", "cases", "first reason"], rows)
        # ...and every one with its own reason, folded away (the JSON holds the same list).
        lines += ["", f"<details><summary>Every unsupported or skipped case ({len(refused)})</summary>", ""]
        lines += [f"- `{r.id}` **{r.outcome.value}**: {_cell(r.message)}" for r in refused]
        lines += ["", "</details>"]
    return lines


def write_reports(board: Scoreboard, directory: str | Path) -> list[Path]:
    """``scoreboard.json`` and ``scoreboard.md`` in ``directory`` (created); the paths written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / JSON_NAME, out / MD_NAME
    json_path.write_text(json.dumps(board.to_dict(), indent=1) + "\n", encoding="utf-8")
    md_path.write_text(markdown(board), encoding="utf-8")
    return [json_path, md_path]
