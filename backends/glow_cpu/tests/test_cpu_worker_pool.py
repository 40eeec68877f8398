"""The entry point's worker threads: kept between calls, stopped with the function, and
started again where they are missing (after ``close()``, in a forked child); parts claimed
and phases awaited on completion, predicated kernels included."""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys

import numpy as np
import pytest
from cpu_cases import dense_block
from glow_cpu.backend import CpuBackend, CpuOptions

import glow_core
from glow_core.graph import Builder, Module
from glow_core.lowering.evaluate import evaluate
from glow_core.types import ElemKind


def _threads_of_this_process() -> int:
    return len(os.listdir("/proc/self/task"))


def _model(rng: np.random.Generator) -> Module:
    """relu(x @ w + bias) over 96 rows: a MatMul shared between threads, an epilogue."""
    return dense_block(rng, 96, 64, 80, "Relu")


def _compile(module: Module, threads: int):
    options = CpuOptions(threads=threads, parallel_work=0, cache=False)
    return glow_core.compile(module, backend=CpuBackend(), options=options)


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")


def test_workers_stay_between_calls_and_stop_with_the_function(rng):
    module = _model(rng)
    before = _threads_of_this_process()
    compiled = _compile(module, threads=3)
    for _ in range(5):
        x = rng.standard_normal((96, 64)).astype(np.float32)
        np.testing.assert_allclose(
            compiled.run({"x": x})["y"], evaluate(module, {"x": x})["y"], rtol=1e-5, atol=1e-5
        )
        assert _threads_of_this_process() == before + 2  # the same two workers each call
    del compiled
    gc.collect()
    assert _threads_of_this_process() == before


def test_close_stops_the_workers_and_a_later_run_starts_them(rng):
    module = _model(rng)
    before = _threads_of_this_process()
    compiled = _compile(module, threads=2)
    x = rng.standard_normal((96, 64)).astype(np.float32)
    first = compiled.run({"x": x})["y"]
    compiled.close()
    assert _threads_of_this_process() == before
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], first)
    assert _threads_of_this_process() == before + 1
    compiled.close()


def _run_in_child(compiled, x, queue) -> None:
    queue.put(compiled.run({"x": x})["y"])


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_a_forked_child_starts_its_own_workers(rng):
    module = _model(rng)
    compiled = _compile(module, threads=2)
    x = rng.standard_normal((96, 64)).astype(np.float32)
    expected = compiled.run({"x": x})["y"]  # the parent's workers are running now
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_run_in_child, args=(compiled, x, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, expected)
    compiled.close()


def test_one_thread_has_no_workers(rng):
    before = _threads_of_this_process()
    compiled = _compile(_model(rng), threads=1)
    compiled.run({"x": rng.standard_normal((96, 64)).astype(np.float32)})
    assert _threads_of_this_process() == before
    compiled.close()  # nothing to stop


@pytest.mark.parametrize("flag", [True, False])
def test_predicated_kernels_on_two_threads(flag, rng):
    """Every thread reads the predicate after the kernel before it is done, and all take the
    same branch: shared kernels run, or are skipped (their output stays poisoned)."""
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (256, 96))
    p = b.placeholder("p", (1,), ElemKind.bool)
    w = b.constant(rng.standard_normal((96, 64)).astype(np.float32) * 0.2, "w")
    when = Builder(fn, predicate=p)
    when.save(when.relu(when.matmul(when.mul(x, 2.0), w)), "y")
    b.save(b.matmul(b.add(x, 1.0), w), "z")
    compiled = _compile(m, threads=2)
    data = rng.standard_normal((256, 96)).astype(np.float32)
    expected = evaluate(m, {"x": data, "p": np.array([flag])})
    for _ in range(3):
        got = compiled.run({"x": data, "p": np.array([flag])})
        np.testing.assert_allclose(got["z"], expected["z"], rtol=1e-5, atol=1e-5)
        if flag:
            np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-5, atol=1e-5)
        else:
            assert np.isnan(got["y"]).all()
    compiled.close()
