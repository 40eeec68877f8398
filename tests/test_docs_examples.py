"""The runnable examples of docs/: every ```python block that starts with an import runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
NEEDS_DEVICE = {"opencl.md"}
"""Pages whose examples need hardware this machine may lack; they run where it exists."""


def _examples() -> list:
    cases = []
    for page in sorted(DOCS.glob("*.md")):
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        runnable = [b for b in blocks if b.startswith(("import ", "from "))]
        cases += [pytest.param(page.name, code, id=f"{page.stem}-{i}") for i, code in enumerate(runnable)]
    return cases


@pytest.mark.parametrize(("page", "code"), _examples())
def test_doc_example_runs(page: str, code: str, tmp_path, monkeypatch) -> None:
    if page in NEEDS_DEVICE:
        pytest.importorskip("glow_opencl")
        from glow_core.plugins import registry

        if registry().get("opencl").info().priority <= 0:
            pytest.skip("no OpenCL device here")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/{page}", "exec"), {"__name__": "__doc_example__"})
