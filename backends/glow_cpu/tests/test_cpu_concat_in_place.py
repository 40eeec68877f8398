"""glow-cpu on blocks whose branches write straight into their slices of a Concat's buffer
(the ``concat-in-place`` IR pass, tests/test_ir_concat.py), against a float64 reference:
fused convolutions (bias, ReLU) writing a slice, one and three threads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "ir_concat_cases", Path(__file__).parents[3] / "tests" / "test_ir_concat.py"
)
cases = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cases)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("branches", cases.CASES)
def test_block_matches_float64_reference_on_cpu(rng, branches, threads, registry, tmp_path, monkeypatch):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    cases.check_block(rng, "cpu", branches, {"threads": threads, "parallel_work": 0})


@pytest.mark.parametrize("c,hw", [(128, 17), (96, 35)])
def test_pool_branch_slice_is_not_planned_over_its_input(rng, c, hw, registry, tmp_path, monkeypatch):
    """Inception's shape: a 1x1 conv branch, then an average pool branch whose conv (bias,
    ReLU fused) writes the second slice; the pool's result is large enough that the planner
    would put it under that slice if the slice's bytes were live only from the ReLU on."""
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    cases.check_block(rng, "cpu", ("conv", "pool"), {"threads": 1}, c=c, hw=hw)
