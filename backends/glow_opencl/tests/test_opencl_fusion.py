"""Fusion of element-wise runs, its memory-safety rule, and what a run does on the device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from glow_opencl.codegen import address_of
from glow_opencl.fusion import Address, inlinable, plan_runs

import glow_core
from glow_core.graph import Module
from glow_core.ir.instructions import AllocActivation, DeallocActivation, TensorView
from glow_core.lowering.evaluate import evaluate
from glow_core.model_zoo import MODELS
from glow_core.runtime.pipeline import compile_stages
from glow_core.types import ElemKind


def _two_branch_module() -> Module:
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (4, 16))
    b.save(b.Add(b.Exp(b.Tanh(x)), b.Sqrt(b.Exp(x))), "y")
    return m


def _compute(ir):
    skip = (AllocActivation, DeallocActivation, TensorView)
    return [i for i in ir.instrs if not isinstance(i, skip)]


def test_an_element_wise_dag_is_one_kernel(backend, rng):
    m = _two_branch_module()
    x = rng.standard_normal((4, 16)).astype(np.float32)
    expected = evaluate(m, {"x": x})["y"]
    fused = glow_core.compile(m, backend=backend)
    unfused = glow_core.compile(m, backend=backend, options={"fuse": False})
    assert fused.kernel_count == 1 and unfused.kernel_count == 5
    for compiled in (fused, unfused):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], expected, rtol=1e-6)


def test_bias_broadcasts_and_relu_splats_are_recomputed_not_stored(backend):
    """In a ResNet block every Broadcast and Splat folds into the kernel that reads it."""
    compiled = glow_core.compile(MODELS["resnet_bottleneck"](), backend=backend)
    kinds = [
        {name.rsplit("/", 1)[-1].split("__")[0] for name in launch.instrs}
        for launch in compiled.program.launches
    ]
    assert not any(k <= {"broadcast", "splat"} for k in kinds)
    assert compiled.kernel_count == 8  # 4 convolutions + 4 fused bias/residual/ReLU kernels


def _stages(backend):
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (64,))
    y = b.placeholder("y", (64,))
    b.save(b.Mul(b.Exp(b.Tanh(x)), y), "out")
    stages = compile_stages(m, backend)
    return stages.ir, [i.kind for i in _compute(stages.ir)]


def test_a_run_never_overwrites_an_operand_another_work_item_still_reads(backend):
    """Fusion is refused when the result's bytes overlap an operand's at a shifted offset."""
    ir, kinds = _stages(backend)
    assert kinds == ["Tanh", "Exp", "Mul"]
    compute = _compute(ir)
    real = lambda v: address_of(v, ir.memory_plan)  # noqa: E731
    assert [len(r) for r in plan_runs(compute, real, {})] == [3]
    out, y = compute[-1].dest, compute[-1].sources[1]

    def shifted(v):
        # The result 4 bytes past operand y: the work-item writing out[i] clobbers y[i + 1]
        # before its neighbour has read it, so the Mul must not join the run.
        if v is out or v is y:
            return Address("activations", 4 if v is out else 0, real(v).nbytes)
        return real(v)

    assert [len(r) for r in plan_runs(compute, shifted, {})] == [2, 1]

    def same(v):
        a = real(v)
        return Address("activations", 0, a.nbytes) if v in (out, y) else a

    assert [len(r) for r in plan_runs(compute, same, {})] == [3]  # in place: read i, then write i


def test_values_read_by_a_non_element_wise_instruction_are_stored(backend):
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (4, 4))
    b.save(b.MatMul(b.Splat(shape=(4, 4), value=2.0), x), "out")
    stages = compile_stages(m, backend)
    assert inlinable(_compute(stages.ir)) == {}
    compiled = glow_core.compile(m, backend=backend)
    x_value = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_allclose(compiled.run({"x": x_value})["out"], 2.0 * np.ones((4, 4)) @ x_value)


def test_outputs_are_poisoned_before_each_run(backend, rng):
    stages = compile_stages(_two_branch_module(), backend)
    ir = stages.ir
    writer = next(i for i in _compute(ir) if i.dest is ir.outputs[0])
    ir.instrs.remove(writer)
    compiled = backend.compile(ir, backend.parse_options({}))
    got = compiled.run({"x": rng.standard_normal((4, 16)).astype(np.float32)})["y"]
    assert np.isnan(got).all()


def test_a_program_is_built_once_per_process(backend):
    first = glow_core.compile(_two_branch_module(), backend=backend)
    programs = dict(first.runtime._programs)
    second = glow_core.compile(_two_branch_module(), backend=backend)
    assert second.runtime._programs == programs


@pytest.mark.parametrize("kind", ["Add", "MatMul"])
def test_float16_kernels_when_a_device_declares_cl_khr_fp16(backend, kind, rng):
    """half is storage only (vload_half/vstore_half, float arithmetic): checked here by
    pretending this device has cl_khr_fp16, which is the one thing that enables it."""
    from glow_opencl.codegen import generate
    from glow_opencl.executor import OpenCLFunction
    from glow_opencl.runtime import select_device

    m = Module()
    b = m.create_function().builder()
    shapes = {"Add": ((5, 7), (5, 7)), "MatMul": ((9, 20), (20, 33))}[kind]
    xs = [b.placeholder(f"x{i}", s, ElemKind.float16) for i, s in enumerate(shapes)]
    b.save(b.create(kind, *xs), "out")
    arrays = {f"x{i}": rng.standard_normal(s).astype(np.float16) for i, s in enumerate(shapes)}
    runtime = select_device()
    for gemm in ("tiled", "vector"):
        target = dataclasses.replace(runtime.target, fp16=True, gemm=gemm)
        ir = compile_stages(m, _Fp16(backend)).ir
        got = OpenCLFunction(ir, runtime, generate(ir, target)).run(arrays)["out"]
        wide = [a.astype(np.float64) for a in arrays.values()]
        expected = wide[0] + wide[1] if kind == "Add" else wide[0] @ wide[1]
        np.testing.assert_allclose(got, expected.astype(np.float16), rtol=2e-3, atol=2e-3)


class _Fp16:
    """A backend view that claims float16 (for the pipeline's support check only)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def is_op_supported(self, node) -> bool:
        return True


def test_profile_times_every_launch_from_profiling_events(backend, rng):
    """The per-kernel profile replays exactly the run's launches; figures are not asserted."""
    from glow_opencl.profile import profile

    compiled = glow_core.compile(MODELS["resnet_bottleneck"](), backend=backend)
    inputs = {"input": rng.standard_normal(compiled.input_types["input"].shape).astype(np.float32)}
    result = profile(compiled, inputs, runs=1)
    launches = compiled.program.launches
    assert [k.instrs for k in result.kernels] == [tuple(launch.instrs) for launch in launches]
    assert [k.family for k in result.kernels] == [launch.kernel.rsplit("_", 1)[0] for launch in launches]
    table = result.table()
    assert "| kernel family | launches | device ms | share |" in table
    assert f"{compiled.kernel_count} launches: kernels" in table


def test_compiled_function_profile_is_the_event_table(backend, rng):
    """``CompiledFunction.profile`` (what ``glow run --profile`` prints) on OpenCL: the
    profiling-event table, medians of the runs asked for."""
    compiled = glow_core.compile(MODELS["small_cnn"](), backend=backend)
    inputs = {"input": rng.standard_normal(compiled.input_types["input"].shape).astype(np.float32)}
    table = compiled.profile(inputs, runs=2)
    assert table.startswith("median of 2 profiled runs")
    assert "| kernel family | launches | device ms | share |" in table


@pytest.mark.parametrize("on", [True, False])
def test_predicated_instructions_are_launched_alone_and_skipped_when_false(backend, rng, on):
    """An element-wise chain under a predicate: never fused with the unpredicated work, each
    launch gated by the flag; when false the output keeps the poison nothing overwrote."""
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    x = b.placeholder("x", (4, 16))
    p = b.placeholder("p", (1,), ElemKind.bool)
    when = glow_core.graph.Builder(fn, predicate=p)
    when.save(when.Exp(when.Tanh(x)), "y")
    b.save(b.Sqrt(b.Exp(x)), "z")
    compiled = glow_core.compile(m, backend=backend)
    gated = [launch for launch in compiled.program.launches if launch.predicate is not None]
    assert gated and all(len(launch.instrs) == 1 for launch in gated)
    value = rng.standard_normal((4, 16)).astype(np.float32)
    out = compiled.run({"x": value, "p": np.array([on])})
    np.testing.assert_allclose(out["z"], np.exp(value.astype(np.float64) / 2), rtol=1e-5)
    if on:
        np.testing.assert_allclose(out["y"], np.exp(np.tanh(value.astype(np.float64))), rtol=1e-5)
    else:
        assert (out["y"].view(np.uint8) == 0xFF).all()
