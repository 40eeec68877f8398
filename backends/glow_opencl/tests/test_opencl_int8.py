"""The int8 kernels (int8.py): QuantizedConv and QuantizedFullyConnected run whole on the
device, bit-equal to the interpreter's integer reference, with the float64 requantization
(cl_khr_fp64) and with the integer one a device without double gets."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from glow_conformance.quantized_models import integer_layer, onnxruntime_qdq, output_step
from glow_opencl.runtime import select_device

import glow_core
from glow_core import Builder, Module
from glow_core.runtime.pipeline import compile_stages, load_model
from glow_core.types import ElemKind

REQUANTIZATIONS = ("fp64", "integer")
_UINT8_OUT = {"output_kind": "uint8", "low": 0, "high": 255}
_CASES = {
    "conv3x3-pad-offsets": ("QuantizedConv", (1, 3, 8, 8), (4, 3, 3, 3), "i8",
                            {"pads": (1, 1, 1, 1), "input_offset": -7, "output_offset": 5}),
    "conv1x1-relu-odd": ("QuantizedConv", (2, 19, 7, 5), (21, 19, 1, 1), "i8", {"input_offset": 3, "low": 3}),
    "conv-grouped-strided": ("QuantizedConv", (2, 4, 9, 7), (6, 2, 3, 2), "i8",
                             {"strides": (2, 1), "group": 2}),
    "conv-depthwise": ("QuantizedConv", (1, 8, 6, 6), (8, 1, 3, 3), "i8",
                       {"pads": (1, 1, 1, 1), "group": 8, "output_offset": -3}),
    "conv-depthwise-strided-uneven-pads": ("QuantizedConv", (2, 8, 11, 9), (8, 1, 3, 3), "i8",
                                           {"pads": (1, 0, 2, 1), "strides": (2, 2), "group": 8,
                                            "input_offset": -5}),
    "conv-uint8-dilated": ("QuantizedConv", (1, 5, 11, 10), (9, 5, 3, 3), "u8",
                           {"dilations": (2, 2), "pads": (0, 1, 1, 0), "input_offset": 128, **_UINT8_OUT}),
    "conv-wide-strided": ("QuantizedConv", (1, 64, 9, 9), (40, 64, 3, 3), "i8",
                          {"pads": (1, 1, 1, 1), "strides": (2, 2), "input_offset": -128}),
    "fc-odd": ("QuantizedFullyConnected", (3, 37), (37, 19), "i8", {"input_offset": -4, "output_offset": 9}),
    "fc-uint8": ("QuantizedFullyConnected", (1, 300), (300, 33), "u8", {"input_offset": 117, **_UINT8_OUT}),
}  # fmt: skip


def _run(m: Module, inputs: dict, requantization: str) -> np.ndarray:
    """``m`` compiled for opencl and run on this device with ``requantization``: "fp64" where
    the device has it, "integer" as a device without cl_khr_fp64 gets it. Run twice with
    different poison bytes in the output: an element no kernel wrote cannot equal both."""
    from glow_opencl import executor
    from glow_opencl.codegen import generate
    from glow_opencl.executor import OpenCLFunction
    from glow_opencl.runtime import select_device

    runtime = select_device()
    if requantization == "fp64" and not runtime.target.fp64:
        pytest.skip("this device has no cl_khr_fp64")
    target = dataclasses.replace(runtime.target, fp64=requantization == "fp64")
    ir = compile_stages(load_model(m), glow_core.plugins.get_backend("opencl")).ir
    program = generate(ir, target)
    assert ("double" in program.source) == (requantization == "fp64")
    assert ("glow_q8_round" in program.source) == (requantization == "integer")
    results = []
    for poison in (0xFF, 0x5A):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(executor, "_POISON", np.uint8(poison))
            results.append(OpenCLFunction(ir, runtime, program).run(inputs)["out"])
    np.testing.assert_array_equal(results[0], results[1])
    return results[0]


@pytest.mark.parametrize("requantization", REQUANTIZATIONS)
@pytest.mark.parametrize("case", sorted(_CASES))
def test_int8_kernel_equals_the_interpreter(backend, registry, rng, case, requantization):
    kind, x_shape, w_shape, source, attrs = _CASES[case]
    m, inputs = integer_layer(rng, kind, x_shape, w_shape, source, **attrs)
    kinds = {n.kind for n in compile_stages(load_model(m), registry.get("opencl")).function.nodes}
    assert kind in kinds and "Convolution" not in kinds and "MatMul" not in kinds
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    got = _run(m, inputs, requantization)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(expected)) > 10, "the case saturates: it would test little"


@pytest.mark.parametrize("requantization", REQUANTIZATIONS)
@pytest.mark.parametrize("kind", ["QuantizedConv", "QuantizedFullyConnected"])
def test_saturation_at_both_bounds_with_a_per_tensor_multiplier(backend, registry, rng, kind, requantization):
    shapes = {"QuantizedConv": ((1, 6, 7, 9), (10, 6, 3, 3)), "QuantizedFullyConnected": ((4, 50), (50, 30))}
    attrs = {"input_offset": 11, "output_offset": -20, "low": -100, "high": 90}
    m, inputs = integer_layer(rng, kind, *shapes[kind], spread=400.0, per_tensor=True, **attrs)
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    np.testing.assert_array_equal(_run(m, inputs, requantization), expected)
    assert (expected == -100).sum() > 10 and (expected == 90).sum() > 10
    assert len(np.unique(expected)) > 15  # and values between them


def _tie_layer(rng) -> tuple[Module, dict, np.ndarray, np.ndarray]:
    """A dense layer whose sums ``a`` (input 1, k = 1: weight + bias) and multipliers ``m``
    put ``a * m`` within an ulp of k + 1/2: the float64 product of the reference lands on the
    half (then to even) or next to it, where the exact rational product may round the other way."""
    columns = 400
    w = rng.integers(-128, 128, (1, columns)).astype(np.int8)
    bias = rng.integers(-(2**30), 2**30, columns).astype(np.int32)
    a = w[0].astype(np.int64) + bias
    halves = rng.integers(-60, 60, columns) + 0.5
    multiplier = halves / a  # float64: one rounding away from the exact quotient
    m = Module()
    b = Builder(m.create_function())
    x = b.placeholder("x", (1, 1), elem=ElemKind.int8)
    layer = b.create(
        "QuantizedFullyConnected",
        x,
        m.create_constant("w", w),
        m.create_constant("bias", bias),
        m.create_constant("mult", multiplier),
    )
    b.save(layer, "out")
    return m, {"x": np.ones((1, 1), np.int8)}, a, multiplier


@pytest.mark.parametrize("requantization", REQUANTIZATIONS)
def test_requantization_rounds_the_float64_product_as_the_reference_does(backend, rng, requantization):
    m, inputs, a, multiplier = _tie_layer(rng)
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    np.testing.assert_array_equal(_run(m, inputs, requantization), expected)
    # The case matters: rounding the exact product would differ from the reference somewhere,
    # and the reference meets exact ties (rounded half to even) elsewhere.
    exact = [Fraction(int(x)) * Fraction(float(y)) for x, y in zip(a, multiplier, strict=True)]
    rational = np.array([np.clip(round(v), -128, 127) for v in exact])
    assert (rational != expected[0]).any()
    assert (np.abs(a * multiplier % 1.0 - 0.5) == 0).sum() > 10


def test_split_multipliers_are_exact():
    from glow_opencl.int8 import split_multiplier

    m = np.array([1e-300, 3.7e-5, 0.5, 1.0 - 2**-53, 2.0**-1074, 123456.789, -0.25, 0.0])
    mantissa, exponent = split_multiplier(m)
    assert (np.abs(mantissa) < 2**53).all()
    np.testing.assert_array_equal(np.ldexp(mantissa.astype(np.float64), exponent), m)


def test_a_layer_whose_sums_may_overflow_int32_is_lowered(backend, registry, rng):
    # 70000 products of up to 255 x 128 can exceed int32: the float64 reference runs it.
    m, inputs = integer_layer(rng, "QuantizedFullyConnected", (1, 70000), (70000, 2), "u8", input_offset=128)
    kinds = {n.kind for n in compile_stages(load_model(m), registry.get("opencl")).function.nodes}
    assert "QuantizedFullyConnected" not in kinds and "MatMul" in kinds
    if not backend.info().supports["MatMul"].count("float64"):
        return  # the lowered layer computes in float64, which this device lacks
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    np.testing.assert_array_equal(glow_core.compile(m, "opencl").run(inputs)["out"], expected)


def test_supports_declares_the_int8_layers(backend):
    supports = backend.info().supports
    assert supports["QuantizedConv"] == ["int8", "uint8"]
    assert supports["QuantizedFullyConnected"] == ["int8", "uint8"]


# ---- an onnxruntime-quantized model, folded to int8 layers --------------------------------


def test_an_onnxruntime_qdq_model_runs_on_the_int8_kernels(backend, registry, rng, tmp_path):
    from glow_core.model_zoo import MODELS, random_inputs

    pytest.importorskip("onnxruntime.quantization")
    qdq = onnxruntime_qdq(MODELS["small_cnn"](batch=2), tmp_path)
    ops = [n.op_type for n in qdq.graph.node]
    kinds = [n.kind for n in compile_stages(load_model(qdq), registry.get("opencl")).function.nodes]
    assert kinds.count("QuantizedConv") == ops.count("Conv") > 0
    assert kinds.count("QuantizedFullyConnected") == ops.count("Gemm")
    assert "Convolution" not in kinds and "MatMul" not in kinds
    inputs = random_inputs(qdq, 7)
    compiled = glow_core.compile(qdq, "opencl")
    got = compiled.run(inputs)
    expected = glow_core.compile(qdq, "interpreter").run(inputs)
    # The int8 layers are exact (the layer tests above), and on a CPU device so are the float
    # parts between them. OpenCL lets a GPU's exp be off by ulps, and the model's output is
    # Softmax's, quantized with a step of 1/255: an H200, passing every layer test, was off by
    # a relative error of 0.0175 here, which is exactly one step over the largest output
    # (1/255 / 0.2235). On a GPU the bound is that one step.
    exact = select_device().target.kind == "cpu"
    step = output_step(qdq)
    for name, value in expected.items():
        if exact:
            np.testing.assert_array_equal(got[name], value)
        else:
            steps = np.abs(got[name].astype(np.float64) - value).max() / step
            assert steps <= 1.001, f"{name}: {steps:.2f} output steps from the interpreter"
        assert np.unique(value).size > 3
