"""The int8 kernels (kernels/int8_conv.py): bit-equal to the interpreter's integer result,
kept only where their int32 sums cannot overflow, vpmaddwd on this x86 host, and
portable IR (an aarch64 bundle of an int8 layer runs under qemu, bit-identical)."""

from __future__ import annotations

import platform
import shutil

import numpy as np
import pytest
from bundle_helpers import assert_bit_identical, build_runner, bundles_compile_in_a_child, run_c
from glow_conformance.quantized_models import SOURCE_KINDS, integer_layer

import glow_core
from glow_core import Builder, Module
from glow_core.runtime.pipeline import compile_stages, load_model
from glow_core.types import ElemKind


def _layer(rng, kind: str, x_shape, w_shape, source="i8", **attrs) -> tuple[Module, dict]:
    """One integer layer on a placeholder, with full-range random operands and symmetric
    weights (-127..127, as the quantize pass makes them)."""
    return integer_layer(rng, kind, x_shape, w_shape, source, weight_low=-127, **attrs)


_CASES = {
    "conv3x3-pad-offsets": (
        "QuantizedConv",
        (1, 3, 8, 8),
        (4, 3, 3, 3),
        "i8",
        {"pads": (1, 1, 1, 1), "input_offset": -7, "output_offset": 5},
    ),
    "conv1x1-relu": ("QuantizedConv", (2, 19, 7, 7), (21, 19, 1, 1), "i8", {"input_offset": 3, "low": 3}),
    "conv-grouped-strided": (
        "QuantizedConv",
        (2, 4, 9, 7),
        (6, 2, 3, 2),
        "i8",
        {"strides": (2, 1), "group": 2},
    ),
    "conv-depthwise": (
        "QuantizedConv",
        (1, 8, 6, 6),
        (8, 1, 3, 3),
        "i8",
        {"pads": (1, 1, 1, 1), "group": 8, "output_offset": -3},
    ),
    "conv-uint8-dilated": (
        "QuantizedConv",
        (1, 5, 11, 10),
        (9, 5, 3, 3),
        "u8",
        {
            "dilations": (2, 2),
            "pads": (0, 1, 1, 0),
            "input_offset": 128,
            "output_kind": "uint8",
            "low": 0,
            "high": 255,
        },
    ),
    "conv-wide": (
        "QuantizedConv",
        (1, 64, 9, 9),
        (40, 64, 3, 3),
        "i8",
        {"pads": (1, 1, 1, 1), "strides": (2, 2), "input_offset": -128},
    ),
    "conv-depthwise-strided-offset": (
        "QuantizedConv",
        (2, 8, 11, 9),
        (8, 1, 3, 3),
        "i8",
        {"pads": (1, 0, 2, 1), "strides": (2, 2), "group": 8, "input_offset": -5},
    ),
    "conv-depthwise-uint8-dilated": (
        "QuantizedConv",
        (1, 5, 9, 9),
        (5, 1, 5, 3),
        "u8",
        {
            "pads": (2, 2, 2, 2),
            "dilations": (2, 1),
            "strides": (1, 2),
            "group": 5,
            "input_offset": 130,
            "output_kind": "uint8",
            "low": 0,
            "high": 255,
        },
    ),
    "conv1x1-partial-tile": ("QuantizedConv", (1, 33, 5, 7), (18, 33, 1, 1), "i8", {"input_offset": -20}),
    "fc": ("QuantizedFullyConnected", (3, 37), (37, 19), "i8", {"input_offset": -4, "output_offset": 9}),
    "fc-uint8": (
        "QuantizedFullyConnected",
        (1, 300),
        (300, 33),
        "u8",
        {"input_offset": 117, "output_kind": "uint8", "low": 0, "high": 255},
    ),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("threads", [1, 3])
def test_int8_kernel_equals_the_integer_reference(registry, rng, case, threads):
    kind, x_shape, w_shape, source, attrs = _CASES[case]
    m, inputs = _layer(rng, kind, x_shape, w_shape, source, **attrs)
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    cpu = glow_core.compile(m, "cpu", options={"threads": threads, "parallel_work": 0})
    got = cpu.run(inputs)["out"]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(expected)) > 10, "the case saturates: it would test little"
    kinds = {n.kind for n in compile_stages(load_model(m), registry.get("cpu")).function.nodes}
    assert kind in kinds and "Convolution" not in kinds and "MatMul" not in kinds


def test_a_layer_whose_sums_may_overflow_int32_is_lowered_to_the_reference(registry, rng):
    # 70000 products of up to 255 x 128 can exceed int32: the float64 reference runs it.
    m, inputs = _layer(rng, "QuantizedFullyConnected", (1, 70000), (70000, 2), "u8", input_offset=128)
    kinds = {n.kind for n in compile_stages(load_model(m), registry.get("cpu")).function.nodes}
    assert "QuantizedFullyConnected" not in kinds and "MatMul" in kinds
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    np.testing.assert_array_equal(glow_core.compile(m, "cpu").run(inputs)["out"], expected)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="checks x86 instruction selection")
def test_the_pair_products_become_vpmaddwd_on_this_x86_host(rng):
    from glow_cpu.jit import host_target

    m, _ = _layer(rng, "QuantizedConv", (1, 16, 6, 6), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    assembly = host_target().machine.emit_assembly(_optimized_module(m))
    # With VNNI, LLVM fuses vpmaddwd and the add after it into vpdpwssd (seen on a Xeon).
    assert "vpmaddwd" in assembly or "vpdpwssd" in assembly
    assert "vpmaddubsw" not in assembly  # would saturate in int16


def _optimized_module(m: Module):
    import llvmlite.binding as llvm
    from glow_cpu.codegen import build_program
    from glow_cpu.jit import host_target

    ir = compile_stages(load_model(m), glow_core.plugins.get_backend("cpu"), stop_before="codegen").ir
    module = llvm.parse_assembly(build_program(ir, 1, False, 0).llvm_ir)
    target = host_target()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    builder = llvm.create_pass_builder(target.machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


_AARCH64_TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64")


@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in _AARCH64_TOOLS) or platform.machine() == "aarch64",
    reason="needs an x86-64 machine with the Debian packages gcc-aarch64-linux-gnu and qemu-user",
)
def test_aarch64_bundle_of_int8_layers_is_bit_identical_under_qemu(registry, rng, tmp_path):
    m, inputs = _layer(rng, "QuantizedConv", (1, 6, 7, 7), (10, 6, 3, 3), pads=(1, 1, 1, 1), input_offset=-9)
    expected = glow_core.compile(m, "interpreter").run(inputs)
    manifest = glow_core.bundle(m, tmp_path, name="net", target="aarch64-linux-gnu")
    exe = build_runner(tmp_path, manifest, compiler=_AARCH64_TOOLS[0])
    runner = (_AARCH64_TOOLS[1], "-L", "/usr/aarch64-linux-gnu")
    assert_bit_identical(run_c(exe, tmp_path, manifest, manifest.entries[0], inputs, runner), expected)


def _int8_stack(rng, layers: int) -> tuple[Module, dict]:
    """``layers`` int8 3x3 convolutions of one shape, then two fully connected layers of one
    shape: each with weights, bias and multipliers of its own."""
    m = Module()
    b = Builder(m.create_function())
    y = b.placeholder("x", (1, 16, 6, 6), elem=ElemKind.int8)
    scale = 40 / (np.sqrt(16 * 9) * 75 * 75)
    for i in range(layers):
        w = m.create_constant(f"w{i}", rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8))
        bias = m.create_constant(f"bias{i}", rng.integers(-5000, 5000, 16).astype(np.int32))
        mult = m.create_constant(f"mult{i}", rng.uniform(0.5, 2.0, 16) * scale)
        y = b.create("QuantizedConv", y, w, bias, mult, pads=(1, 1, 1, 1), input_offset=-3)
    y = b.reshape(y, (4, 144))
    for i in range(2):
        w = m.create_constant(f"fc{i}", rng.integers(-127, 128, (144, 144)).astype(np.int8))
        bias = m.create_constant(f"fc_bias{i}", rng.integers(-5000, 5000, 144).astype(np.int32))
        mult = m.create_constant(f"fc_mult{i}", rng.uniform(0.5, 2.0, 144) * 40 / (12 * 75 * 75))
        y = b.create("QuantizedFullyConnected", y, w, bias, mult, input_offset=2)
    b.save(y, "out")
    return m, {"x": rng.integers(-128, 128, (1, 16, 6, 6)).astype(np.int8)}


def test_int8_layers_share_kernels_and_read_their_own_weights(registry, rng):
    """The int8 emitters take their weights only through ``k.pack`` and the bias and
    multipliers through pointers: repeated layers share one kernel (``check_sharing`` proves
    each would have had exactly that code alone), store each weight once, and still compute
    the integer reference bit for bit."""
    from glow_cpu.codegen import build_program

    m, inputs = _int8_stack(rng, layers=3)
    ir = compile_stages(load_model(m), registry.get("cpu"), stop_before="codegen").ir
    program = build_program(ir, 1, False, 0, check_sharing=True)
    kinds = [kind for _, kind in program.steps]
    assert kinds.count("QuantizedConv") == 3 and kinds.count("QuantizedFullyConnected") == 2
    assert program.kernels <= len(program.steps) - 3, program.steps  # 3 convs, 2 FCs: 2 kernels
    packed = {f"w{i}" for i in range(3)} | {"fc0", "fc1"}
    assert packed.isdisjoint(program.layout.constant_offsets), "an int8 weight is stored twice"
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    got = glow_core.compile(m, "cpu", options={"cache": False}).run(inputs)["out"]
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(expected)) > 10, "the case saturates: it would test little"


@pytest.mark.parametrize(
    ("name", "shape", "params"),
    [
        ("int8_panels", (18, 33, 1, 1), {"group": 1, "mr": 4}),
        ("int8_panels", (40, 32, 3, 3), {"group": 2, "mr": 6}),
        ("int8_fc_byte_pairs", (37, 19), {"mr": 32}),
    ],
)
def test_int8_packed_sizes_match_the_packers(name, shape, params, rng):
    """Code generation places the int8 panels by size alone, without packing them."""
    import glow_cpu.kernels.int8_packing  # noqa: F401 - registers the int8 packers
    from glow_cpu.packing import pack, packed_nbytes

    value = rng.integers(-127, 128, shape).astype(np.int8)
    assert packed_nbytes(name, shape, params) == pack(name, value, params).nbytes


# ---- QuantizedAdd (kernels/int8_add.py) ---------------------------------------------------

_ADD_CASES = {
    "offsets": ((1, 8, 5, 5), "i8", "i8", {"lhs_offset": -3, "rhs_offset": 4, "output_offset": 2}),
    "relu-odd-size": ((3, 37), "i8", "i8", {"output_offset": -9, "low": -9}),  # 111: a vector tail
    "uint8-mixed": (
        (2, 3, 7),
        "u8",
        "i8",
        {"lhs_offset": 128, "output_kind": "uint8", "output_offset": 130, "low": 0, "high": 255},
    ),
    "one-element": ((1,), "i8", "i8", {"rhs_offset": -128}),
    "resnet-block": ((1, 64, 14, 14), "i8", "i8", {"lhs_offset": -20, "rhs_offset": 7, "low": 5}),
}


def _add(rng, shape, lhs_kind: str, rhs_kind: str, **attrs) -> tuple[Module, dict]:
    """One QuantizedAdd of two placeholders, multipliers that spread the sum over the range."""
    m = Module()
    b = Builder(m.create_function())
    a = b.placeholder("a", shape, elem=SOURCE_KINDS[lhs_kind][0])
    c = b.placeholder("c", shape, elem=SOURCE_KINDS[rhs_kind][0])
    multipliers = {"lhs_multiplier": rng.uniform(0.2, 0.7), "rhs_multiplier": rng.uniform(0.2, 0.7)}
    b.save(b.create("QuantizedAdd", a, c, **{**multipliers, **attrs}), "out")
    feeds = {}
    for name, kind in (("a", lhs_kind), ("c", rhs_kind)):
        info = np.iinfo(SOURCE_KINDS[kind][1])
        feeds[name] = rng.integers(info.min, int(info.max) + 1, shape).astype(SOURCE_KINDS[kind][1])
    return m, feeds


@pytest.mark.parametrize("case", sorted(_ADD_CASES))
@pytest.mark.parametrize("threads", [1, 3])
def test_quantized_add_kernel_equals_the_integer_reference(registry, rng, case, threads):
    shape, lhs, rhs, attrs = _ADD_CASES[case]
    m, inputs = _add(rng, shape, lhs, rhs, **attrs)
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    got = glow_core.compile(m, "cpu", options={"threads": threads, "parallel_work": 0}).run(inputs)["out"]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    if got.size > 20:
        assert len(np.unique(expected)) > 10, "the case saturates: it would test little"
    kinds = {n.kind for n in compile_stages(load_model(m), registry.get("cpu")).function.nodes}
    assert "QuantizedAdd" in kinds and "Add" not in kinds


def test_quantized_add_reference_is_the_float64_formula(rng):
    """The interpreter's result against numpy's float64 arithmetic of the declaration,
    including ties (multipliers of 0.5 put many sums on .5): half to even."""
    shape = (4, 33)
    halves = {"lhs_multiplier": 0.5, "rhs_multiplier": 0.25}
    m, inputs = _add(rng, shape, "i8", "u8", lhs_offset=1, rhs_offset=128, output_offset=-1, **halves)
    a, c = (inputs[k].astype(np.float64) for k in "ac")
    want = np.clip(np.rint((a - 1) * 0.5 + (c - 128) * 0.25) - 1, -128, 127).astype(np.int8)
    assert np.any(((a - 1) * 0.5 + (c - 128) * 0.25) % 1 == 0.5)  # ties are tested
    for backend in ("interpreter", "cpu"):
        np.testing.assert_array_equal(glow_core.compile(m, backend).run(inputs)["out"], want)


# ---- MaxPool on the integers (kernels/int8_pool.py) ---------------------------------------

_POOL_CASES = {
    "stem-3x3-s2-p1": ((1, 8, 17, 15), "i8", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    "uint8-2x2": ((2, 3, 8, 9), "u8", {"kernel": (2, 2), "strides": (2, 2)}),
    "uneven-pads": ((1, 4, 7, 10), "i8", {"kernel": (3, 2), "strides": (1, 3), "pads": (2, 0, 1, 1)}),
    "wide-row": ((1, 2, 5, 61), "u8", {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}),
    # 56 outputs a row: one whole 32-lane chunk and a 24-lane rest, as ResNet-50's stem pool
    "resnet-stem-row": ((1, 3, 112, 112), "i8", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    "two-whole-chunks": ((2, 2, 4, 65), "u8", {"kernel": (2, 2), "strides": (1, 1)}),
    "stride-3-wide-window": (
        (1, 3, 13, 101),
        "i8",
        {"kernel": (4, 5), "strides": (3, 3), "pads": (1, 2, 2, 1)},
    ),
    "uint8-pads-s2": ((3, 5, 9, 77), "u8", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    "one-column": ((1, 2, 6, 1), "i8", {"kernel": (2, 1), "strides": (1, 1), "pads": (1, 0, 0, 0)}),
}


def _window_max(x: np.ndarray, kernel, strides, pads, out_shape) -> np.ndarray:
    """Each output's maximum over the in-bounds part of its window (numpy, the test's own)."""
    (kh, kw), (sh, sw), (top, left) = kernel, strides, pads[:2]
    out = np.empty(out_shape, x.dtype)
    for oy in range(out_shape[2]):
        rows = slice(max(oy * sh - top, 0), oy * sh - top + kh)
        for ox in range(out_shape[3]):
            cols = slice(max(ox * sw - left, 0), ox * sw - left + kw)
            out[:, :, oy, ox] = x[:, :, rows, cols].max(axis=(2, 3))
    return out


@pytest.mark.parametrize("case", sorted(_POOL_CASES))
@pytest.mark.parametrize("threads", [1, 3])
def test_int8_max_pool_equals_the_reference(rng, case, threads):
    shape, kind, attrs = _POOL_CASES[case]
    elem, dtype = SOURCE_KINDS[kind]
    m = Module()
    b = Builder(m.create_function())
    b.save(b.create("MaxPool", b.placeholder("x", shape, elem=elem), **attrs), "out")
    info = np.iinfo(dtype)
    reference = glow_core.compile(m, "interpreter")
    compiled = glow_core.compile(m, "cpu", options={"threads": threads, "parallel_work": 0})
    # two inputs in turn on one compiled function: an output the kernel skipped would keep
    # the first run's value (integer outputs have no NaN poison to show it)
    for _ in range(2):
        inputs = {"x": rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)}
        expected = reference.run(inputs)["out"]
        got = compiled.run(inputs)["out"]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, expected)
        pads = attrs.get("pads", (0, 0, 0, 0))
        np.testing.assert_array_equal(
            got, _window_max(inputs["x"], attrs["kernel"], attrs["strides"], pads, got.shape)
        )


def test_int8_max_pool_compiles_for_an_avx512_cpu(tmp_path):
    """The pool kernel's IR compiles for an AVX-512 CPU too: LLVM's loop vectorizer aborted
    the process on small max loops there (test_cpu_pool_window.py), so the kernel keeps its
    loops scalar and its vectors explicit. In a child process, so an abort fails this test."""
    script = f"""
import glow_core
from glow_core import Builder, Module
from glow_core.types import ElemKind
for elem, stride in ((ElemKind.int8, 2), (ElemKind.uint8, 1), (ElemKind.int8, 3)):
    m = Module()
    b = Builder(m.create_function())
    x = b.placeholder("x", (1, 4, 23, 70), elem=elem)
    b.save(b.create("MaxPool", x, kernel=(3, 3), strides=(stride, stride), pads=(1, 1, 1, 1)), "out")
    glow_core.bundle(m, {str(tmp_path)!r} + f"/{{elem.name}}{{stride}}", name="pool",
                     target="x86_64-unknown-linux-gnu", cpu="emeraldrapids")
print("compiled")
"""
    bundles_compile_in_a_child(script, tmp_path, objects=3)


# ---- QuantizeLinear (kernels/quantize.py) -------------------------------------------------


@pytest.mark.parametrize("kind", ["i8", "u8"])
@pytest.mark.parametrize("shape", [(1, 3, 7, 11), (37,), (2, 64, 9)])
@pytest.mark.parametrize("threads", [1, 3])
def test_quantize_linear_kernel_equals_the_reference(registry, rng, kind, shape, threads):
    """Bit-equal to the lowering on values around the whole range, exact ties of x / scale
    (half to even), values that saturate, the infinities and signed zeros."""
    dtype = SOURCE_KINDS[kind][1]
    scale, zero = np.float32(0.0625), dtype(-5 if kind == "i8" else 131)  # 1/16: ties are exact
    m = Module()
    b = Builder(m.create_function())
    x = b.placeholder("x", shape, elem=ElemKind.float32)
    s, z = m.create_constant("s", np.array(scale)), m.create_constant("z", np.array(zero))
    b.save(b.create("QuantizeLinear", x, s, z), "out")
    values = rng.standard_normal(shape).astype(np.float32) * 6
    flat = values.reshape(-1)
    specials = [0.5 * 0.0625, 1.5 * 0.0625, -2.5 * 0.0625, 100.0, -100.0, np.inf, -np.inf, -0.0, 0.0]
    flat[: len(specials)] = np.array(specials, np.float32)[: flat.size]
    inputs = {"x": values}
    expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
    got = glow_core.compile(m, "cpu", options={"threads": threads, "parallel_work": 0}).run(inputs)["out"]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    info = np.iinfo(dtype)
    want = np.clip(np.rint(values.astype(np.float64) / 0.0625) + int(zero), info.min, info.max)
    np.testing.assert_array_equal(got, want.astype(dtype))  # independent of both
    kinds = {n.kind for n in compile_stages(load_model(m), registry.get("cpu")).function.nodes}
    assert "QuantizeLinear" in kinds and "Floor" not in kinds
