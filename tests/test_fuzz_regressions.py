"""Models the fuzzer found glow mishandling, kept so each stays fixed (docs/fuzzing.md).

``fuzz_regressions/expected.json`` is the one list: per model file, the outcome it must have
(``"GlowError"``: refused with a GlowError; ``"agreed"``: runs and matches both oracles;
``"ran"``: runs without a failure, where the oracles refuse the model or disagree),
what the fuzzer found, and, while the fix is pending in other work, ``"pending"``, which
makes the test ``xfail(strict=True)`` so that it fails once the fix lands, to be flipped.
Each model runs in a fuzz worker: memory-capped and timed, like any fuzz case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz.spec import file_recipe
from fuzz.supervisor import Result, Supervisor

HERE = Path(__file__).parent / "fuzz_regressions"
EXPECTED: dict[str, dict[str, str]] = json.loads((HERE / "expected.json").read_text())
OUTCOMES = {"GlowError": {"refused"}, "agreed": {"agreed"}, "ran": {"agreed", "unchecked"}}


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    with Supervisor(workers=2, timeout_s=60.0) as supervisor:
        done = supervisor.run([file_recipe(HERE / name) for name in EXPECTED])
    return {Path(r.recipe["id"]).name: r for r in done}


def _param(name: str) -> object:
    pending = EXPECTED[name].get("pending")
    marks = [pytest.mark.xfail(strict=True, reason=pending)] if pending else []
    return pytest.param(name, marks=marks, id=name.removesuffix(".onnx"))


@pytest.mark.parametrize("name", [_param(name) for name in EXPECTED])
def test_fuzz_regression(name: str, results: dict[str, Result]) -> None:
    result, entry = results[name], EXPECTED[name]
    error = result.error or {}
    got = f"{result.outcome} {error.get('type', '')} at {error.get('site', '')}: {error.get('message', '')}"
    why = f"{name} (found: {entry['found']}): {got} {result.note}"
    assert result.outcome in OUTCOMES[entry["expected"]], why
