"""Counts the docs quote ("34 core primitives") are the code's: a page that drifts fails here.

Each phrase below names one set the code computes; every "<number> <phrase>" in the pages
for users and backend authors (docs/, the README, the SDK template's README) must give that
set's size. Write a count with one of these phrases, or not at all.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from glow_core.model_zoo import MODELS
from glow_core.primitives import CORE, VIEWS
from glow_core.spec import NODES, PRIMITIVES

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        *ROOT.glob("docs/*.md"),
        ROOT / "README.md",
        ROOT / "backend_sdk/glow_backend_sdk/template/README.md.jinja",
    ]
)

COUNTS = {
    "core primitives": len(CORE),
    "primitives": len(PRIMITIVES),
    "views": len(VIEWS),
    "high-level nodes": len(NODES),
    "zoo models": len(MODELS),
}
"""Phrase -> the size of the set it names (longest phrases are matched first)."""

_QUOTED = re.compile(r"\b(\d+) (" + "|".join(sorted(map(re.escape, COUNTS), key=len, reverse=True)) + r")\b")


def _quotes() -> list:
    cases = []
    for page in PAGES:
        for line_number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in _QUOTED.finditer(line):
                where = f"{page.relative_to(ROOT)}:{line_number}"
                cases.append(pytest.param(int(match[1]), match[2], id=f"{where}-{match[2]}"))
    return cases


@pytest.mark.parametrize(("quoted", "phrase"), _quotes())
def test_quoted_count_is_the_codes(quoted: int, phrase: str) -> None:
    assert quoted == COUNTS[phrase], f"the page says {quoted} {phrase}; the code has {COUNTS[phrase]}"


def test_the_backend_guide_quotes_the_core_count() -> None:
    text = (ROOT / "docs/writing-a-backend.md").read_text(encoding="utf-8")
    assert f"{len(CORE)} core primitives" in text
