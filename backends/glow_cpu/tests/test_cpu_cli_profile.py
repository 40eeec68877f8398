"""`glow run --profile` on glow-cpu: the profile option is turned on for the run, every
kernel of the function is timed, and the outputs still match onnxruntime."""

from __future__ import annotations

import re

import onnx
import pytest

import glow_core
from glow_core.cli import main
from glow_core.errors import BackendError, InputError
from glow_core.model_zoo import random_inputs, small_cnn


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=7), str(path))
    return str(path)


def _instruction_rows(out: str) -> list[tuple[str, float]]:
    """(instruction, ms) of the per-instruction table."""
    table = out.split("| instruction | kind | ms | share |", 1)[1]
    return [
        (m.group(1), float(m.group(2)))
        for m in re.finditer(r"^\| (\S+) \| [^|]+ \| ([0-9.]+) \| [0-9.]+% \|$", table, re.MULTILINE)
    ]


def test_run_profile_times_every_kernel(model_path, registry, capsys):
    assert main(["run", model_path, "--backend", "cpu", "--profile", "--runs", "3", "--check"]) == 0
    out = capsys.readouterr().out
    assert "median of 3 profiled runs" in out
    assert "(OK" in out  # profiling does not change the results
    rows = _instruction_rows(out)
    names = [name for name, _ in rows]
    assert any(name.endswith("/convolution") for name in names), names
    assert len(names) == len(set(names)) >= 5
    assert sum(ms for _, ms in rows) > 0


def test_profile_needs_the_profile_option(registry, rng):
    seed = int(rng.integers(1 << 30))
    model = small_cnn(seed=seed)
    compiled = glow_core.compile(model, backend="cpu", options={"threads": 1})
    with pytest.raises(BackendError, match="compiled without profiling"):
        compiled.profile(random_inputs(model, seed), runs=2)


def test_profile_rejects_no_runs(registry, rng):
    seed = int(rng.integers(1 << 30))
    model = small_cnn(seed=seed)
    compiled = glow_core.compile(model, backend="cpu", options={"threads": 1, "profile": True})
    with pytest.raises(InputError, match="at least 1"):
        compiled.profile(random_inputs(model, seed), runs=0)


def test_backend_without_kernel_times_refuses_before_printing(model_path, registry, capsys):
    assert main(["run", model_path, "--backend", "interpreter", "--profile"]) == 2
    captured = capsys.readouterr()
    assert "cannot time its kernels" in captured.err and "--backend cpu" in captured.err
    assert "output:" not in captured.out
