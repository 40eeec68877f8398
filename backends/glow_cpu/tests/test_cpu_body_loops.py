"""The body calls a repeated run of steps (an unrolled recurrence) from a loop over a table
of addresses: the same kernels, the same arguments, so the same bits as the unrolled body.

The cpu backend keeps recurrent layers whole (``kernels/recurrent.py``); here they are
unrolled, as for a recurrence it cannot keep, so there are repeated steps to loop over."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from glow_cpu import body
from glow_cpu.body_loops import Run, find_runs
from glow_cpu.codegen import Step
from glow_cpu.kernels import recurrent
from onnx import TensorProto, helper

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo import gru_text, random_inputs


@pytest.fixture(autouse=True)
def unrolled_recurrences(monkeypatch):
    monkeypatch.setattr(recurrent, "kept", lambda node: False)


def _lstm(seq: int = 9, batch: int = 2, features: int = 5, hidden: int = 7) -> onnx.ModelProto:
    """One bidirectional LSTM layer over ``seq`` steps, weights ~ U(-0.5, 0.5)."""
    rng = np.random.default_rng(11)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.uniform(-0.5, 0.5, shape).ravel())

    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction="bidirectional"
    )
    graph = helper.make_graph(
        [node],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 2, batch, hidden])],
        [
            weight("W", 2, 4 * hidden, features),
            weight("R", 2, 4 * hidden, hidden),
            weight("B", 2, 8 * hidden),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, inputs: dict, threads: int, loops: bool, monkeypatch) -> dict:
    monkeypatch.setattr(body, "LOOPS", loops)
    options = {"cache": False, "threads": threads, "parallel_work": 0}
    compiled = glow_core.compile(model, backend="cpu", options=options)
    return compiled.run(inputs)


def _body_text(model: onnx.ModelProto, threads: int, loops: bool, monkeypatch) -> str:
    from glow_cpu.backend import CpuBackend
    from glow_cpu.codegen import build_program

    from glow_core.runtime.pipeline import compile_stages

    monkeypatch.setattr(body, "LOOPS", loops)
    stages = compile_stages(model, CpuBackend())
    return build_program(stages.ir, threads, False, 0).modules[-1][1]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "model", [lambda: gru_text(seq=10, layers=2), _lstm], ids=["gru_text", "lstm_bidirectional"]
)
def test_loop_body_gives_the_unrolled_bits(model, threads, monkeypatch):
    model = model()
    inputs = random_inputs(model, seed=3)
    looped = _run(model, inputs, threads, True, monkeypatch)
    unrolled = _run(model, inputs, threads, False, monkeypatch)
    assert looped.keys() == unrolled.keys()
    for name in looped:
        np.testing.assert_array_equal(looped[name], unrolled[name])
    error = max_relative_error(looped, onnxruntime_outputs(model, inputs))
    assert error < 1e-4, f"relative error {error:.3g} against onnxruntime"


@pytest.mark.parametrize("threads", [1, 2])
def test_recurrence_body_is_a_few_loops(threads, monkeypatch):
    """40 unrolled steps per direction: the looped body has a small fraction of the calls."""
    model = gru_text(seq=40, layers=1)
    looped = _body_text(model, threads, True, monkeypatch)
    unrolled = _body_text(model, threads, False, monkeypatch)
    calls_looped, calls_unrolled = looped.count(" call "), unrolled.count(" call ")
    assert "glow_loop." in looped and "glow_loop." not in unrolled
    assert calls_looped * 10 < calls_unrolled, (calls_looped, calls_unrolled)


class _FakeStep(Step):
    def __init__(self, token: int):
        self.addresses = [(token % 3, 0)]
        self.predicate = None
        self.token = token

    @property
    def phases(self):  # type: ignore[override]
        return []


def _steps(tokens: list[int]) -> list[Step]:
    return [_FakeStep(t) for t in tokens]


def test_find_runs_takes_the_longest_repetition_first():
    # a prefix, 6 x (0 1 2), a suffix
    tokens = [2, 2, 1, *([0, 1, 2] * 6), 1, 1]
    runs = find_runs(_steps(tokens), min_steps=6)
    assert runs == [Run(first=3, period=3, repeats=6)]
    run = runs[0]
    assert all(tokens[i] == tokens[i + 3] for i in range(run.first, run.end - 3))


def test_find_runs_leaves_short_or_predicated_repetitions_alone():
    assert find_runs(_steps([0, 1] * 3), min_steps=8) == []
    steps = _steps([0, 1] * 8)
    for step in steps:
        step.predicate = (2, 0)
    assert find_runs(steps, min_steps=4) == []


@pytest.mark.parametrize("shared", [True, False], ids=["shared-library", "linked-on-load"])
def test_bundle_of_a_looped_body_matches_the_jit(registry, tmp_path, shared):
    """The tables (offsets, and the kernels' addresses: relocations) work in a bundle too."""
    model = gru_text(seq=10, layers=2)
    options = {"threads": 2, "parallel_work": 0}
    glow_core.bundle(model, tmp_path, name="gru", options=options, shared=shared)
    inputs = random_inputs(model, seed=4)
    got = glow_core.load_bundle(tmp_path)["gru"].run(inputs)
    want = glow_core.compile(model, backend="cpu", options={**options, "cache": False}).run(inputs)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("threads", [1, 2])
def test_profiled_loop_body_records_every_step(threads, monkeypatch):
    """Each step's cycle count goes to its own slot, in a loop as unrolled: all written, in order."""
    monkeypatch.setattr(body, "LOOPS", True)
    model = gru_text(seq=10, layers=1)
    options = {"cache": False, "threads": threads, "parallel_work": 0, "profile": True}
    compiled = glow_core.compile(model, backend="cpu", options=options)
    compiled.run(random_inputs(model, seed=2))
    ticks = compiled._ticks  # one slot before the first step, one after each
    assert ticks[0] > 0 and bool(np.all(np.diff(ticks) >= 0)), ticks
