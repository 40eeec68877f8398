"""The fuzzer's own machinery: the supervisor sees each failure kind, recipes replay exactly,
every mutation applies, the generator builds models of glow's ops, agreement is strict where
it must be, and minimization drops what a failure does not need."""

from __future__ import annotations

import random
import time

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import generate, mutate, oracle, spec
from fuzz.campaign import Summary, is_tolerated, reproducer_name, save_reproducer
from fuzz.minimize import minimize
from fuzz.supervisor import Result, Supervisor
from glow_core.frontends.onnx import SUPPORTED_OPS
from glow_core.model_zoo import small_cnn


def probe(action: str, mutations: list | None = None) -> spec.Recipe:
    return {
        "id": action,
        "base": {"kind": "probe", "action": action},
        "mutations": mutations or [],
        "bytes": None,
        "truncate": None,
        "feeds": 0,
    }


@pytest.fixture(scope="module")
def supervisor():
    # 15 s: the hang probe costs that much once, and a loaded machine (CI beside other jobs)
    # never makes an ordinary probe look like a hang (4 s did, with the suite on 2 busy cores).
    with Supervisor(workers=1, memory_mb=1024, timeout_s=15) as sup:
        yield sup


def test_supervisor_sees_crash_hang_memory_cap_and_refusal(supervisor) -> None:
    results = {
        r.recipe["id"]: r
        for r in supervisor.run([probe(a) for a in ("segfault", "hang", "allocate", "raise")])
    }
    assert results["segfault"].outcome == "crash"
    assert "SIGSEGV" in results["segfault"].note
    assert results["hang"].outcome == "hang"
    # Allocating twice the cap fails in the worker (MemoryError) instead of growing the machine.
    assert results["allocate"].outcome == "raw-exception"
    assert results["allocate"].error["type"] == "MemoryError"
    assert results["raise"].outcome == "refused"
    # The pool replaced the dead and stalled workers: an ordinary case still runs.
    [after] = supervisor.run([spec.recipe(0, 0)])
    assert after.outcome not in ("crash", "hang", "fuzzer-error")


def test_minimize_drops_steps_the_failure_does_not_need(supervisor) -> None:
    steps = [["opset", 1], ["ir-version", 2], ["graph-output", 3]]
    [crash] = supervisor.run([probe("segfault", steps)])
    smallest = minimize(supervisor, crash)
    assert smallest.outcome == "crash"
    assert smallest.recipe["mutations"] == []


def test_a_crash_found_after_the_first_event_is_still_reported(monkeypatch) -> None:
    """The worker's first events are read only once it has died (as on a loaded machine):
    the crash is reported, not dropped with the worker."""
    from fuzz import supervisor as supervisor_module

    real_wait = supervisor_module.wait

    def late_wait(connections, timeout=None):
        time.sleep(0.5)  # the probe sends two events and segfaults well within this
        return real_wait(connections, timeout)

    monkeypatch.setattr(supervisor_module, "wait", late_wait)
    with Supervisor(workers=1, memory_mb=1024, timeout_s=15) as sup:
        [crash] = sup.run([probe("segfault")])
        assert crash.outcome == "crash" and "SIGSEGV" in crash.note
        [after] = sup.run([probe("raise")])
        assert after.outcome == "refused"


def test_recipes_replay_exactly() -> None:
    for index in range(30):
        recipe = spec.recipe(5, index)
        assert recipe == spec.recipe(5, index)
        assert spec.build(recipe)[0] == spec.build(recipe)[0]
    assert spec.recipe(5, 1) != spec.recipe(6, 1)


@pytest.mark.parametrize("name", sorted(mutate.MUTATIONS))
def test_every_mutation_applies_to_a_zoo_model(name: str) -> None:
    changed = 0
    before = small_cnn().SerializeToString()
    for seed in range(12):
        model = small_cnn()
        if mutate.MUTATIONS[name](model, random.Random(seed)) is not None:
            # Protobuf-level damage stays serializable (it is what a corrupt exporter writes).
            changed += model.SerializeToString() != before
    assert changed > 0, f"mutation {name} never changed small_cnn"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_generated_models_use_glows_ops(rng: random.Random) -> None:
    model = generate.generate(rng)
    assert 1 <= len(model.graph.node) <= 3
    assert {n.op_type for n in model.graph.node} <= SUPPORTED_OPS
    assert model.graph.output
    onnx.load_from_string(model.SerializeToString())


def test_most_generated_models_are_valid() -> None:
    """Valid models are what reach glow's numerics: most draws must pass onnx's checker."""
    valid = 0
    for seed in range(60):
        try:
            onnx.checker.check_model(generate.generate(random.Random(seed)), full_check=True)
            valid += 1
        except Exception:
            pass
    assert valid >= 30, f"only {valid} of 60 generated models pass onnx.checker"


def test_truncate_keeps_a_prefix_with_typed_outputs() -> None:
    model = small_cnn()
    spec.truncate(model, 2)
    assert len(model.graph.node) == 2
    assert [o.name for o in model.graph.output] == list(model.graph.node[1].output)
    onnx.checker.check_model(model)


def test_disagreement_is_strict_on_types_shapes_and_non_finite_values(rng) -> None:
    x = rng.standard_normal((3, 4)).astype(np.float32)
    assert oracle.disagreement({"y": x}, {"y": x.copy()}) is None
    assert oracle.disagreement({"y": x * (1 + 1e-6)}, {"y": x}) is None
    assert "relative error" in oracle.disagreement({"y": x + 0.1 * np.abs(x).max()}, {"y": x})
    assert "float64" in oracle.disagreement({"y": x.astype(np.float64)}, {"y": x})
    assert oracle.disagreement({"y": x.reshape(4, 3)}, {"y": x}) is not None
    nan = x.copy()
    nan[0, 0] = np.nan
    assert oracle.disagreement({"y": nan}, {"y": nan.copy()}) is None
    assert "NaN" in oracle.disagreement({"y": nan}, {"y": x})
    assert (
        oracle.disagreement({"y": np.array([1, 2])}, {"y": np.array([1, 3])}) == "output 'y': values differ"
    )
    assert oracle.disagreement({"a": x}, {"b": x}) is not None


def test_feeds_follow_declared_inputs_and_refuse_impossible_ones() -> None:
    model = small_cnn()
    feeds, _ = oracle.make_feeds(model, 3)
    assert feeds["input"].shape == (1, 3, 32, 32) and feeds["input"].dtype == np.float32
    assert np.std(feeds["input"]) > 0.5
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = -4
    feeds, why = oracle.make_feeds(model, 3)
    assert feeds is None and "negative" in why


def test_reproducer_files_say_what_happened(tmp_path) -> None:
    result = Result(
        spec.recipe(1, 2),
        "raw-exception",
        b"\x08\x07",
        ["zoo small_cnn", "opset: default opset = 99"],
        {
            "type": "KeyError",
            "site": "glow_core/frontends/onnx/loader.py:load",
            "message": "'x'",
            "traceback": "Traceback ...",
        },
    )
    path = save_reproducer(result, tmp_path)
    assert path.name == reproducer_name(result) + ".onnx" == "raw-exception-KeyError-onnx-loader-load.onnx"
    assert path.read_bytes() == b"\x08\x07"
    first = path.with_suffix(".txt").read_text().splitlines()[0]
    assert first == "raw-exception: KeyError at glow_core/frontends/onnx/loader.py:load: 'x'"


def test_tolerated_failures_are_counted_apart() -> None:
    summary = Summary(seed=0, backend="interpreter")
    loader = Result(
        spec.recipe(0, 1), "raw-exception", error={"type": "KeyError", "site": "glow_core/frontends/x.py:f"}
    )
    memory = Result(
        spec.recipe(0, 2), "raw-exception", error={"type": "MemoryError", "site": "glow_core/ir/y.py:g"}
    )
    passes = Result(
        spec.recipe(0, 3), "raw-exception", error={"type": "ValueError", "site": "glow_core/passes/z.py:h"}
    )
    tolerate = ("glow_core/frontends/", "MemoryError")
    assert is_tolerated(loader, tolerate) and is_tolerated(memory, tolerate)
    for result in (loader, memory, passes):
        summary.add(result, tolerate)
    assert summary.failed
    assert list(summary.failures) == [passes.signature]
    assert len(summary.tolerated) == 2
    assert "FAILURES: 1 cases, 1 distinct" in summary.text()
