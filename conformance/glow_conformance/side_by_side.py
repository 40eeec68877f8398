"""The side-by-side scoreboard of ``glow conformance --all``: every backend, plus references.

onnxruntime and ``onnx.reference`` run the same ONNX node tests, counted the same way, so a
backend's column can be read against what the established runtimes manage on the same cases.
The ONNX pass rates are counted twice: over every case, and over the cases whose opset
onnxruntime loads (``opsets.OpsetScope``). ``write_docs`` puts that table, with the date and
versions, between markers in a Markdown page (docs/onnx-support.md).

Not to be confused with ``compare.py``, which decides whether one case's outputs match its
oracle; this module only lays finished scoreboards side by side.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from glow_conformance.opsets import OpsetScope
from glow_conformance.report import JSON_NAME, MD_NAME, headline, table, write_reports
from glow_conformance.results import CaseResult, Outcome, Scoreboard, by_group, count
from glow_core.errors import GlowError

DOCS_START = "<!-- onnx-pass-rates:start -->"
DOCS_END = "<!-- onnx-pass-rates:end -->"

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


def _rate(passed: int, total: int) -> str:
    return f"{passed} ({100 * passed / total:.1f}%)" if total else "-"


def pass_rate_table(boards: list[Scoreboard], scope: OpsetScope) -> list[str]:
    """ONNX node tests passed per target: over all cases and over those of onnxruntime's opsets."""
    with_onnx = [b for b in boards if "onnx" in b.layers]
    if not with_onnx:
        return []
    ids = {r.id for b in with_onnx for r in b.layers["onnx"]}
    header = ["target", "version", f"all {len(ids)} cases"]
    if scope.newest is not None:
        within = sum(scope.within(i) for i in ids)
        header.append(f"{within} cases of opsets onnxruntime loads (<= {scope.newest})")
    rows = []
    for board in with_onnx:
        results = board.layers["onnx"]
        passed = [r for r in results if r.outcome is Outcome.PASSED]
        row = [board.target, str(board.meta.get("version", "?")), _rate(len(passed), len(results))]
        if scope.newest is not None:
            mine = [r for r in results if scope.within(r.id)]
            row.append(_rate(sum(scope.within(r.id) for r in passed), len(mine)))
        rows.append(row)
    return table(header, rows)


def comparison_markdown(boards: list[Scoreboard], scope: OpsetScope | None = None) -> str:
    names = [b.target for b in boards]
    lines = ["# glow conformance: all backends", ""]
    lines += [f"- {headline(b)}" for b in boards]
    rates = pass_rate_table(boards, scope) if scope else []
    if rates:
        lines += ["", "## ONNX node tests passed", "", *rates]
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


def write_comparison(
    boards: list[Scoreboard], directory: str | Path, scope: OpsetScope | None = None
) -> list[Path]:
    """One report per target in ``DIR/<target>/``, and the side-by-side one in ``DIR``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for board in boards:
        written += write_reports(board, out / board.target)
    json_path, md_path = out / JSON_NAME, out / MD_NAME
    summary = {b.target: b.to_dict() for b in boards}
    json_path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    md_path.write_text(comparison_markdown(boards, scope), encoding="utf-8")
    return [*written, json_path, md_path]


def docs_block(boards: list[Scoreboard], scope: OpsetScope, command: str) -> str:
    """The pass-rate table with when, with what and how it was measured (Markdown)."""
    meta = boards[0].meta
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    newest = (
        f"; onnxruntime loads default-domain opsets up to {scope.newest} (asked of it at run time)"
        if scope.newest is not None
        else "; onnxruntime is not installed"
    )
    about = (
        f"Measured {meta.get('date', '?')} with {versions}{newest}. Generated by `{command}`; "
        "with `--report DIR` the same run lists every case that did not pass, with its reason."
    )
    lines = [*textwrap.wrap(about, width=100, break_on_hyphens=False), "", *pass_rate_table(boards, scope)]
    return "\n".join(lines)


def _docs_parts(page: Path) -> tuple[str, str]:
    """The page up to its start marker and from its end marker on; a GlowError if it has none."""
    try:
        text = page.read_text(encoding="utf-8")
    except OSError as err:
        raise GlowError(f"cannot read the docs page {str(page)!r} for --docs: {err.strerror}") from None
    start, end = text.find(DOCS_START), text.find(DOCS_END)
    if start < 0 or end < start:
        raise GlowError(
            f"{str(page)!r} has no {DOCS_START} ... {DOCS_END} markers; "
            "add them (in that order) where the pass-rate table belongs"
        )
    return text[: start + len(DOCS_START)], text[end:]


def check_docs(path: str | Path) -> None:
    """Refuse a page without the markers before a long run, not after it."""
    _docs_parts(Path(path))


def write_docs(path: str | Path, block: str) -> Path:
    """Replace what lies between ``DOCS_START`` and ``DOCS_END`` in ``path`` with ``block``."""
    page = Path(path)
    head, tail = _docs_parts(page)
    page.write_text(f"{head}\n{block}\n{tail}", encoding="utf-8")
    return page
