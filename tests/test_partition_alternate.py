"""Forced alternation (``alternate=N``) and the executor's check of what each partition returns."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend, InterpreterOptions
from graph_helpers import new_function
from partition_helpers import Restricted

from glow_core.accuracy import max_relative_error
from glow_core.errors import BackendError, PartitionError
from glow_core.ir.instructions import IRFunction
from glow_core.partition import partition_function, resolve_devices
from glow_core.runtime.compiled import CompiledFunction
from glow_core.runtime.partitioned import compile_partitioned


def _chain(rng: np.random.Generator, layers: int = 4, width: int = 32):
    """x -> (MatMul, Tanh) x layers, plus a skip from the first product to the end."""
    m, fn, b = new_function()
    x = b.placeholder("x", [2, width])
    y, first = x, None
    weights = []
    for i in range(layers):
        weights.append((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        y = b.Tanh(b.MatMul(y, b.constant(weights[-1]), name=f"fc{i}"), name=f"act{i}")
        first = first or y
    fn.save(b.add(y, first, name="skip"), "out")
    return m, fn, weights


def _reference(weights: list[np.ndarray], x: np.ndarray) -> dict[str, np.ndarray]:
    """The chain in float64 numpy."""
    y = x.astype(np.float64)
    first = None
    for w in weights:
        y = np.tanh(y @ w)
        first = y if first is None else first
    return {"out": y + first}


def test_stretches_take_turns_between_the_first_and_the_last_device(rng):
    _, fn, _ = _chain(rng)  # 9 operators: fc0 act0 fc1 act1 fc2 act2 fc3 act3 skip
    devices = resolve_devices([InterpreterBackend(), InterpreterBackend()])
    plan = partition_function(fn, devices, alternate=3)
    labels = [p.device.label for p in plan.partitions]
    assert labels == ["interpreter:0", "interpreter:1", "interpreter:0"], plan.summary()
    where = {n.name: p.device.label for p in plan.partitions for n in p.nodes}
    # Stretches of three: (fc0 act0 fc1) (act1 fc2 act2) (fc3 act3 skip).
    assert [where[f"fc{i}"] for i in range(4)] == [
        "interpreter:0",
        "interpreter:0",
        "interpreter:1",
        "interpreter:0",
    ]
    # Tensors cross both ways; the skip connection's goes from the first stretch to the last.
    crossing = {name: (b.producer, b.consumers) for name, b in plan.boundaries.items()}
    assert crossing == {"fc1": (0, (1,)), "act2": (1, (2,)), "act0": (0, (2,))}


def test_a_node_the_stretch_device_does_not_run_keeps_its_support_device(rng):
    _, fn, _ = _chain(rng)
    devices = resolve_devices([Restricted(["MatMul"]), InterpreterBackend()])
    plan = partition_function(fn, devices, alternate=3)
    where = {n.name: p.device.label for p in plan.partitions for n in p.nodes}
    # Stretches (fc0 act0 fc1) (act1 fc2 act2) (fc3 act3 skip): only fc2 moves to the reference.
    assert [where[f"fc{i}"] for i in range(4)] == ["acme", "acme", "interpreter", "acme"]
    assert all(where[f"act{i}"] == "interpreter" for i in range(4))  # acme runs no Tanh


def test_an_alternated_model_equals_the_unpartitioned_run(registry, rng):
    module, _, weights = _chain(rng)
    split = compile_partitioned(module, ["interpreter", "interpreter"], alternate=4)
    assert len(split.steps) >= 4
    for _ in range(2):
        x = rng.standard_normal((2, 32)).astype(np.float32)
        assert max_relative_error(split.run({"x": x}), _reference(weights, x)) < 1e-5


@pytest.mark.parametrize("stretches", [1, 0, -2, 2.5, True, "4"])
def test_a_stretch_count_that_cuts_nothing_is_refused(rng, stretches):
    _, fn, _ = _chain(rng)
    devices = resolve_devices([InterpreterBackend(), InterpreterBackend()])
    with pytest.raises(PartitionError, match="at least 2"):
        partition_function(fn, devices, alternate=stretches)


class _Forgetful(CompiledFunction):
    """Wraps a compiled function and drops (or misshapes) one of its outputs."""

    def __init__(self, inner: CompiledFunction, ir: IRFunction, mode: str):
        super().__init__(ir)
        self.inner, self.mode = inner, mode

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.inner.run(inputs)
        name = sorted(outputs)[0]
        if self.mode == "drop":
            del outputs[name]
        else:
            outputs[name] = outputs[name][:1]
        return outputs


class _ForgetsAnOutput(InterpreterBackend):
    name = "forgetful"
    mode = "drop"

    def info(self) -> Any:
        return super().info().model_copy(update={"name": self.name})

    def compile(self, ir: IRFunction, options: InterpreterOptions) -> CompiledFunction:  # type: ignore[override]
        return _Forgetful(super().compile(ir, options), ir, self.mode)


class _MisshapesAnOutput(_ForgetsAnOutput):
    mode = "shape"


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (_ForgetsAnOutput, r"partition 0 on 'forgetful' returned no '\w+': a CompiledFunction returns"),
        (_MisshapesAnOutput, r"partition 0 on 'forgetful' returned float32\[1, 32\] for '\w+', expected"),
    ],
)
def test_a_partition_that_returns_a_missing_or_misshapen_tensor_is_named(registry, rng, backend, message):
    module, _, _ = _chain(rng)
    split = compile_partitioned(module, [backend(), "interpreter"], alternate=2)
    with pytest.raises(BackendError, match=message):
        split.run({"x": rng.standard_normal((2, 32)).astype(np.float32)})
