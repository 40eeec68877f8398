"""Partitioned models compiled and run as a DAG, compared with independent oracles."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from graph_helpers import new_function
from installed_backends import install_backend
from partition_helpers import Restricted, conv_matmul_backend

import glow_core
from glow_core import model_zoo
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.errors import NoBackendError
from glow_core.runtime.partitioned import PartitionedFunction
from glow_core.runtime.trace import TraceRecorder


@pytest.fixture
def cpu(install_registry) -> str:
    return install_backend(install_registry, "cpu")


def _branches(rng: np.random.Generator):
    """Two independent MatMul branches between element-wise nodes: partitions that can run
    concurrently, joined at the end."""
    m, fn, b = new_function()
    x = b.placeholder("x", [64, 256])
    w1, w2 = (b.constant((rng.standard_normal((256, 256)) / 16).astype(np.float32)) for _ in range(2))
    left = b.Tanh(b.MatMul(b.Tanh(x, name="l0"), w1, name="lm"), name="l1")
    right = b.Sigmoid(b.MatMul(b.Exp(x, name="r0"), w2, name="rm"), name="r1")
    fn.save(b.add(left, right, name="join"), "out")
    fn.save(left, "left")
    return m, (w1.value, w2.value)


def _branches_reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> dict[str, np.ndarray]:
    x64 = x.astype(np.float64)
    left = np.tanh(np.tanh(x64) @ w1)
    right = 1 / (1 + np.exp(-(np.exp(x64) @ w2)))
    return {"out": left + right, "left": left}


def test_partitions_run_as_a_dag_and_match_float64_numpy(registry, rng):
    module, weights = _branches(rng)
    compiled = glow_core.compile(module, backend=[Restricted(["MatMul"]), "interpreter"])
    assert isinstance(compiled, PartitionedFunction)
    assert [s.partition.device.label for s in compiled.steps].count("acme") == 2
    x = rng.standard_normal((64, 256)).astype(np.float32)
    result = compiled.run({"x": x})
    assert max_relative_error(result, _branches_reference(x, *weights)) < 1e-5


def test_a_partitioned_function_may_be_called_from_several_threads(registry, rng):
    module, weights = _branches(rng)
    compiled = glow_core.compile(module, backend=[Restricted(["MatMul"]), "interpreter"])
    feeds = [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(6)]
    errors: list[float] = [np.inf] * len(feeds)

    def work(i: int) -> None:
        for _ in range(3):
            errors[i] = max_relative_error(
                compiled.run({"x": feeds[i]}), _branches_reference(feeds[i], *weights)
            )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(errors) < 1e-5
    compiled.close()


def test_a_single_backend_name_keeps_the_unpartitioned_path(registry, rng):
    module, _ = _branches(rng)
    assert not isinstance(glow_core.compile(module, backend="interpreter"), PartitionedFunction)


def test_a_node_no_backend_runs_is_refused_before_anything_compiles(registry, rng, monkeypatch):
    module, _ = _branches(rng)
    compiled = []
    monkeypatch.setattr(Restricted, "compile", lambda *a: compiled.append(a))
    with pytest.raises(
        NoBackendError,
        match=r"no backend of \['acme'\] runs 4 node\(s\): Exp\[float32\] 'r0'; Sigmoid\[float32\] 'r1'; "
        r"Tanh\[float32\] 'l0'",
    ):
        glow_core.compile(module, backend=[Restricted(["MatMul", "Add"])])
    assert not compiled


MODELS = {
    "resnet_bottleneck": model_zoo.resnet_bottleneck,
    "mobilenetv2_block": model_zoo.mobilenetv2_block,
    # One BERT-mini layer at half its sequence: products big enough that the cost model keeps
    # them on the fast backend (the zoo's small encoder's go to cpu, as they should).
    "bert_layer": lambda: model_zoo.transformer_encoder(seq=64, hidden=256, heads=4, ffn=1024, layers=1),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_on_a_conv_matmul_backend_with_cpu_match_onnxruntime(cpu, name):
    model = MODELS[name]()
    inputs = model_zoo.random_inputs(model, 0)
    compiled = glow_core.compile(
        model, backend=[conv_matmul_backend(), "cpu"], options={"cpu": {"threads": 1}}
    )
    backends = {s.partition.device.label for s in compiled.steps}
    assert backends == {"acme", "cpu"}, compiled.summary()
    assert max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs)) < 1e-4


def test_a_model_split_by_memory_over_two_cpu_devices_matches_onnxruntime(cpu):
    model = model_zoo.mlp()  # 7.1 MiB of weights: 3.1 MiB in 784x1024, 4 MiB in 1024x1024
    inputs = model_zoo.random_inputs(model, 0)
    compiled = glow_core.compile(model, backend=["cpu", "cpu"], options={"memory_bytes": 5 * 2**20})
    assert [s.partition.device.label for s in compiled.steps] == ["cpu:0", "cpu:1"]
    assert all(s.partition.memory_bytes <= 5 * 2**20 for s in compiled.steps)
    assert max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs)) < 1e-4


def test_cpu_forced_into_two_partitions_by_hand_equals_one(cpu):
    model = model_zoo.small_cnn()
    inputs = model_zoo.random_inputs(model, 0)
    whole = glow_core.compile(model, backend="cpu", options={"threads": 1})
    split = glow_core.compile(
        model, backend=["cpu", "cpu"], options={"threads": 1}, partition={"block[12]/*": "cpu:0", "*": 1}
    )
    assert [s.partition.device.label for s in split.steps] == ["cpu:0", "cpu:1"]
    expected = whole.run(inputs)
    assert max_relative_error(split.run(inputs), expected) < 1e-5


def test_opencl_with_cpu_matches_onnxruntime(install_registry):
    install_backend(install_registry, "opencl")
    import glow_cpu.plugin
    import glow_interpreter.plugin
    import glow_opencl.plugin

    install_registry(opencl=glow_opencl.plugin, cpu=glow_cpu.plugin, interpreter=glow_interpreter.plugin)
    model = model_zoo.resnet_bottleneck()
    inputs = model_zoo.random_inputs(model, 0)
    compiled = glow_core.compile(model, backend=["opencl", "cpu"])
    assert compiled.steps[0].partition.device.label == "opencl"
    assert max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs)) < 1e-4


def test_a_session_runs_a_partitioned_model(cpu):
    model = model_zoo.resnet_bottleneck()
    inputs = model_zoo.random_inputs(model, 0)
    session = glow_core.load(model, backend=[conv_matmul_backend(), "cpu"])
    assert max_relative_error(session.run(inputs), onnxruntime_outputs(model, inputs)) < 1e-4


def test_a_trace_has_a_track_per_device_and_events_for_runs_transfers_and_kernels(cpu, tmp_path, rng):
    model = model_zoo.resnet_bottleneck()
    inputs = model_zoo.random_inputs(model, 0)
    compiled = glow_core.compile(
        model, backend=[conv_matmul_backend(), "cpu"], options={"cpu": {"profile": True, "threads": 1}}
    )
    recorder = TraceRecorder()
    result = compiled.run_traced(inputs, recorder)
    assert max_relative_error(result, onnxruntime_outputs(model, inputs)) < 1e-4
    recorder.write(tmp_path / "run.json")
    trace = json.loads((tmp_path / "run.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"device acme", "device cpu"}
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_category = {c: [e for e in complete if e["cat"] == c] for c in ("partition", "transfer", "kernel")}
    assert len(by_category["partition"]) == len(compiled.steps)
    assert {e["args"]["bytes"] for e in by_category["transfer"]} <= {
        b.nbytes for b in compiled.plan.boundaries.values()
    }
    assert by_category["transfer"] and by_category["kernel"]
    cpu_track = next(e["tid"] for e in trace["traceEvents"] if e.get("args", {}).get("name") == "device cpu")
    assert all(e["tid"] == cpu_track for e in by_category["kernel"])
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
