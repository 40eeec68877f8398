"""One-primitive functions for the tests: build, compile for cpu, run, compare."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from glow_cpu.backend import CpuBackend, CpuOptions
from onnx import TensorProto, helper, numpy_helper

from glow_core.accuracy import relative_error
from glow_core.graph import Module
from glow_core.ir import generate_ir, optimize_ir, plan_memory
from glow_core.ir.instructions import IRFunction
from glow_core.schedule import schedule
from glow_core.spec import PRIMITIVES, OpSpec
from glow_core.types import Type


def one_primitive_ir(
    kind: str, types: list[Type], attrs: dict[str, Any], constants: dict[int, np.ndarray] | None = None
) -> IRFunction:
    """The planned IR of ``out = kind(in0, in1, ...)`` with no graph optimization in between;
    operands listed in ``constants`` are weights with those values instead of inputs."""
    constants = constants or {}
    m = Module()
    fn = m.create_function()
    b = fn.builder()
    # Module.create_constant keeps the array's kind (the builder's constant() makes float64
    # values float32, as literals in a float32 graph should be).
    inputs = [
        m.create_constant(f"w{i}", constants[i])
        if i in constants
        else b.placeholder(f"in{i}", t.shape, t.elem)
        for i, t in enumerate(types)
    ]
    b.save(b.create(kind, *inputs, **attrs), "out")
    ir = generate_ir(fn, schedule(fn))
    optimize_ir(ir)
    ir.memory_plan = plan_memory(ir)
    return ir


def sample(spec: OpSpec, rng: np.random.Generator, types: list[Type], attrs: dict[str, Any]):
    """Operands and the reference result; redrawn while the reference leaves its domain (an
    integer zero divisor), as the conformance suite does."""
    for _ in range(8):
        arrays = spec.sample_inputs(rng, types, attrs)
        try:
            with np.errstate(divide="raise", invalid="raise"):
                return arrays, np.asarray(spec.evaluate(arrays, attrs))
        except FloatingPointError:
            continue
    pytest.skip(f"{spec.name}: the declared sample keeps leaving the reference's domain")


def run_case(
    kind: str,
    types: list[Type],
    attrs: dict[str, Any],
    rng: np.random.Generator,
    threads: int = 1,
    constant: tuple[int, ...] = (),
) -> float:
    """Relative error of the cpu result against the float64 reference (0 or inf for exact
    kinds); operands whose index is in ``constant`` are compiled as weights."""
    spec = PRIMITIVES[kind]
    full = spec.complete_attrs(attrs)
    arrays, expected = sample(spec, rng, types, full)
    ir = one_primitive_ir(kind, types, attrs, {i: arrays[i] for i in constant})
    compiled = CpuBackend().compile(ir, CpuOptions(threads=threads, parallel_work=0))
    feeds = {f"in{i}": a for i, a in enumerate(arrays) if i not in constant}
    got = compiled.run(feeds)["out"]
    out_type = spec.infer_type(types, full)
    if not out_type.elem.is_float:
        expected = expected.astype(out_type.dtype)
        return 0.0 if np.array_equal(got, expected.reshape(got.shape)) else float("inf")
    return relative_error(got, expected.reshape(out_type.shape))


def dense_block(
    rng: np.random.Generator, rows: int, inputs: int, outputs: int, activation: str = "Tanh"
) -> Module:
    """``activation(x @ w + bias)`` with a constant weight: a MatMul and its fused epilogue;
    ``Tanh`` also scales by 0.5 (an epilogue of three ops)."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (rows, inputs))
    w = b.constant(rng.standard_normal((inputs, outputs)).astype(np.float32) * 0.2, "w")
    bias = b.constant(rng.standard_normal(outputs).astype(np.float32), "bias")
    y = b.fully_connected(x, w, bias)
    if activation == "Tanh":
        b.save(b.mul(b.Tanh(y), 0.5), "y")
    else:
        b.save(b.relu(y), "y")
    return m


def pool_model(op: str, shape: tuple[int, ...], **attrs: Any):
    """An ONNX model of one pooling node ``op`` (MaxPool, AveragePool) with attributes
    ``attrs`` (kernel_shape, strides, pads, ...) over an input ``x`` of ``shape``; output ``y``."""
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def conv_model(shape: tuple[int, ...], epilogue: str, seed: int, dilation: int = 1):
    """An ONNX Conv (``shape`` = batch, channels, height, width, out channels, kernel, stride,
    pad, group) followed by ``epilogue`` (bias_relu, bias_clip, bias_residual_relu, none), its
    seeded random inputs and the name of its output."""
    n, c, h, w, cout, k, s, pad, group = shape
    rng = np.random.default_rng(seed)
    span = dilation * (k - 1) + 1
    oh, ow = (h + 2 * pad - span) // s + 1, (w + 2 * pad - span) // s + 1
    scale = 1.0 / np.sqrt(c * k * k / group)
    weight = (rng.standard_normal((cout, c // group, k, k)) * scale).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    initializers = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    conv_inputs = ["x", "w"] if epilogue == "none" else ["x", "w", "b"]
    conv = helper.make_node(
        "Conv",
        conv_inputs,
        ["c"],
        kernel_shape=[k, k],
        strides=[s, s],
        pads=[pad] * 4,
        group=group,
        dilations=[dilation] * 2,
    )
    nodes = [conv]
    last = "c"
    if epilogue == "bias_relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        last = "y"
    elif epilogue == "bias_clip":
        initializers += [
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
            numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        ]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        last = "y"
    elif epilogue == "bias_residual_relu":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, cout, oh, ow]))
        nodes += [helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
        last = "y"
    graph = helper.make_graph(
        nodes,
        "conv_epilogue",
        inputs,
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [n, cout, oh, ow])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    if epilogue == "bias_residual_relu":
        feeds["r"] = rng.standard_normal((n, cout, oh, ow)).astype(np.float32)
    return model, feeds, last


def compile_on_threads(
    names: list[str], beside: Callable[[threading.Event], None] | None = None
) -> dict[str, Any]:
    """The zoo models ``names``, each compiled for cpu by ``CpuBackend.compile`` itself (not
    ``glow_core.compile``, which would take turns) on a thread of its own with two compile
    threads, all released together; ``beside(done)``, if given, starts with them on one more
    thread and runs until ``done`` is set, once every compile has ended. Any compile's error
    fails the caller."""
    from glow_core.model_zoo import MODELS
    from glow_core.runtime.pipeline import compile_stages

    backend = CpuBackend()
    lowered = {n: compile_stages(MODELS[n](), backend, verify_each=False).ir for n in names}
    options = CpuOptions(cache=False, threads=1, compile_threads=2)
    compiled: dict[str, Any] = {}
    errors: list[BaseException] = []
    done = threading.Event()
    start = threading.Barrier(len(names) + (beside is not None))

    def compile_one(name: str) -> None:
        try:
            start.wait()
            compiled[name] = backend.compile(lowered[name], options)
        except BaseException as err:  # reported by the calling thread
            errors.append(err)

    def run_beside() -> None:
        start.wait()
        beside(done)

    extra = [threading.Thread(target=run_beside)] if beside is not None else []
    compilers = [threading.Thread(target=compile_one, args=(n,)) for n in names]
    for t in [*extra, *compilers]:
        t.start()
    for t in compilers:
        t.join()
    done.set()
    for t in extra:
        t.join()
    assert not errors, errors
    return compiled
