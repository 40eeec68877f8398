"""docs/new-primitive.md's example, applied: which files change, and the primitive then runs.

The page promises that a new primitive is its declaration in its family's module and nothing
else in the core. This test takes the page's declaration as written, appends it to that module
in a copy of ``glow_core`` (this checkout is never edited, nothing is monkeypatched), lists the
files that differ from the original, and, in a fresh Python that imports the copy ahead of the
installed one, runs the new primitive on the interpreter against a float64 oracle, round-trips
it through the text format, and runs its conformance cases. The interpreter and conformance
packages are the unchanged installed ones: they find the primitive through the registry alone.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glow_core.spec import NODES, PRIMITIVES

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs/new-primitive.md"

FILES_A_PRIMITIVE_TOUCHES = 1
"""The declaration's module, and nothing else (the page's promise)."""

ORACLES = {"Abs": "np.where(x < 0, -x, x)"}
"""The page's example -> its float64 oracle over ``x``, written without the reference's call."""

_RUN = """
import sys
import numpy as np
import glow_core
from glow_core.graph.builder import Builder
from glow_core.graph.function import Module
from glow_core.graph.printer import function_to_text
from glow_core.spec import PRIMITIVES

copy, name, oracle, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
assert glow_core.__file__.startswith(copy), f"imported {glow_core.__file__}, not the copy"
assert name in PRIMITIVES, f"{name} is not registered"
module = Module("new_primitive")
b = Builder(module.create_function())
b.save(getattr(b, name)(b.placeholder("x", (3, 7))), "y")
text = function_to_text(module.function)
assert function_to_text(glow_core.parse_function(text)) == text, text
rng = np.random.default_rng(seed)
x = rng.standard_normal((3, 7)).astype(np.float32) * 4
y = glow_core.compile(module, "interpreter").run({"x": x})["y"]
x = x.astype(np.float64)
expected = eval(oracle)
error = np.max(np.abs(y - expected)) / np.max(np.abs(expected))
assert error < 1e-6, error
print("relative error", error)
"""


def _declaration() -> tuple[str, str, str]:
    """The page's first declaration: (the family module it goes into, the code, its name)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## A new primitive") : text.index("## A new high-level node")]
    module = re.search(r"appended to `(glow_core/primitives/\w+\.py)`", section)
    code = re.search(r"```python\n(@primitive\n.*?)```", section, re.S)
    assert module and code, "the page no longer names a family module and shows a declaration"
    name = re.search(r"^class (\w+)", code[1], re.M)
    assert name
    return module[1], code[1], name[1]


def _changed_files(original: Path, copy: Path) -> list[str]:
    """Paths (relative to ``copy``'s parent) of files that differ, were added or were removed."""
    changed = []
    compare = filecmp.dircmp(original, copy, ignore=["__pycache__"])
    pending = [(compare, copy.name)]
    while pending:
        node, prefix = pending.pop()
        changed += [f"{prefix}/{f}" for f in node.left_only + node.right_only + node.diff_files]
        pending += [(sub, f"{prefix}/{name}") for name, sub in node.subdirs.items()]
    return sorted(changed)


def test_the_documented_primitive_is_one_file_and_runs_on_the_interpreter(tmp_path, rng) -> None:
    for plugin in ("glow_interpreter", "glow_conformance"):  # what runs the new primitive
        pytest.importorskip(plugin)
    module, code, name = _declaration()
    assert name not in PRIMITIVES and name not in NODES, f"{name} exists already: the example must be new"
    assert name in ORACLES, f"give the page's example {name} an oracle in ORACLES"
    copy = tmp_path / "glow_core"
    shutil.copytree(ROOT / "glow_core", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / module, "a", encoding="utf-8") as family:
        family.write("\n\n" + code)

    changed = _changed_files(ROOT / "glow_core", copy)
    assert changed == [module]
    assert len(changed) == FILES_A_PRIMITIVE_TOUCHES

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    seed = int(rng.integers(2**31))
    run = subprocess.run(
        [sys.executable, "-c", _RUN, str(copy), name, ORACLES[name], str(seed)],
        env=env,
        cwd=tmp_path,  # not the checkout: its own glow_core would come first on the path
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]

    report = tmp_path / "report"
    conformance = [
        *(sys.executable, "-m", "glow_conformance", "--backend", "interpreter", "--layers", "primitives"),
        *("--select", f"{name}[*", "--in-process", "--seed", str(seed), "--report", str(report)),
    ]
    run = subprocess.run(conformance, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    counts = json.loads((report / "scoreboard.json").read_text())["layers"]["primitives"]["groups"][name]
    passed = counts.pop("passed")
    assert passed > 0 and not any(counts.values()), counts


def test_the_oracle_is_not_the_reference() -> None:
    """The oracle is its own formula: on signed zeros and NaN it must agree with numpy's."""
    x = np.array([-2.5, -0.0, 0.0, 3.0, np.nan])
    assert np.array_equal(eval(ORACLES["Abs"]), np.abs(x), equal_nan=True)
