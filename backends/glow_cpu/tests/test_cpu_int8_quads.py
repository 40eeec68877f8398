"""The int8 quad layout (kernels/int8_dot.py, int8_conv.py): byte quads multiplied by
``dot4``, which is ``vpdpbusd`` on a VNNI target and plain IR elsewhere.

This machine may have no VNNI: the layout (packing, the uint8 shift of int8 inputs and of
their zero point, the interleaved gather, the epilogue) runs here through the generic
``dot4`` (``int8_dot=quads``), bit-equal to the interpreter's integer result; the
instruction itself is checked by compiling for VNNI CPUs (assembly only, in a child
process: an LLVM abort would end the test run), and runs wherever the host has it (the
same tests then execute it). The runtime poisons outputs (every byte 0xFF) before each
run, so an element no kernel wrote shows in the exact comparison.
"""

from __future__ import annotations

import ctypes
import json
import platform
import subprocess
import sys

import numpy as np
import pytest
from glow_conformance.quantized_models import integer_layer
from glow_cpu.codegen import build_program
from glow_cpu.jit import LoadedObject, compile_object, host_target
from glow_cpu.kernels import int8_conv, int8_dense, int8_dot, int8_shape
from glow_cpu.kernels.int8_dot import Choice, choose, dot4
from glow_cpu.loops import I32, PTR, VOID
from glow_cpu.packing import pack, packed_nbytes
from glow_cpu.registers import vnni_bits
from llvmlite import ir

import glow_core
from glow_core.runtime.pipeline import compile_stages, load_model

HOST_VNNI = vnni_bits(host_target().triple, host_target().features, host_target().cpu)

# (kind, input shape, weight shape, input kind, attributes): K not a multiple of 4 (and
# below 4), channel counts that leave a partial panel, padding read through a nonzero zero
# point, the extreme zero points (shifted to 0 and 255), strides, groups, dilations, a
# pointwise layer with a partial last tile, dense layers.
_CONV, _FC = "QuantizedConv", "QuantizedFullyConnected"
_UINT8_OUT = {"output_kind": "uint8", "low": 0, "high": 255}
_CASES = {
    "conv3x3-pad-k27": (_CONV, (1, 3, 8, 8), (5, 3, 3, 3), "i8", {"pads": (1,) * 4, "input_offset": -7}),
    "conv1x1-k3-partial-tile": (_CONV, (2, 3, 5, 7), (9, 3, 1, 1), "i8", {"input_offset": 3, "low": 3}),
    "conv1x1-k1": (_CONV, (1, 1, 6, 6), (7, 1, 1, 1), "i8", {"input_offset": 11}),
    "conv-grouped-strided": (
        _CONV, (2, 6, 9, 7), (10, 3, 3, 2), "i8",
        {"strides": (2, 1), "group": 2, "pads": (1, 0, 1, 1), "input_offset": 127},
    ),
    "conv-offset-min": (
        _CONV, (1, 13, 7, 9), (11, 13, 3, 3), "i8",
        {"pads": (2, 1, 0, 1), "strides": (2, 2), "input_offset": -128},
    ),
    "conv-uint8-dilated": (
        _CONV, (1, 5, 11, 10), (9, 5, 3, 3), "u8",
        {"dilations": (2, 2), "pads": (0, 1, 1, 0), "input_offset": 200, **_UINT8_OUT},
    ),
    "conv-u8-offset-max": (_CONV, (1, 7, 6, 6), (6, 7, 2, 2), "u8", {"pads": (1,) * 4, "input_offset": 255}),
    "conv-wide": (_CONV, (1, 64, 9, 9), (40, 64, 3, 3), "i8", {"pads": (1,) * 4, "input_offset": -3}),
    "fc": (_FC, (3, 37), (37, 19), "i8", {"input_offset": -4, "output_offset": 9}),
    "fc-uint8-k302": (
        _FC, (2, 302), (302, 33), "u8",
        {"input_offset": 117, **_UINT8_OUT},
    ),
}  # fmt: skip


def _spy_on_quads(monkeypatch) -> list[int]:
    """Count the quad micro-kernels emitted, the convolution's and the dense kernel's
    ``dot4`` steps (proof that the option reached the kernels)."""
    calls: list[int] = []

    def spy(module, name: str) -> None:
        original = getattr(module, name)

        def counted(*args):
            calls.append(1)
            return original(*args)

        monkeypatch.setattr(module, name, counted)

    spy(int8_conv, "_quad_micro_kernel")
    spy(int8_dense, "dot4")
    return calls


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("threads", [1, 3])
def test_quads_equal_the_integer_reference(monkeypatch, rng, case, threads):
    kind, x_shape, w_shape, source, attrs = _CASES[case]
    m, inputs = integer_layer(rng, kind, x_shape, w_shape, source, weight_low=-128, **attrs)
    reference = glow_core.compile(m, "interpreter")
    calls = _spy_on_quads(monkeypatch)
    options = {"int8_dot": "quads", "threads": threads, "parallel_work": 0, "cache": False}
    cpu = glow_core.compile(m, "cpu", options=options)
    assert calls, "the quad layout was not used"
    for feed in (inputs, {"x": np.flip(inputs["x"]).copy()}):  # a second input: nothing stale
        expected = reference.run(feed)["out"]
        got = cpu.run(feed)["out"]
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
        assert len(np.unique(expected)) > 10, "the case saturates: it would test little"


_TILE_CASES = ("conv1x1-k3-partial-tile", "conv-grouped-strided", "conv-offset-min", "conv-wide", "fc")
"""Partial tiles of 32 positions (35 and 63 grid positions), partial panels of 3, 5, 8 and
12 channels, strides and groups, a dense layer."""


@pytest.mark.parametrize(("quad_mr", "vectors"), [(3, 1), (5, 2), (8, 2), (12, 2)])
@pytest.mark.parametrize("threads", [1, 3])
def test_quad_tiles_of_every_size_equal_the_integer_reference(monkeypatch, rng, quad_mr, vectors, threads):
    """The tile knobs bench/int8_tiles.py --quads sweeps (``int8_shape.QUAD_MR``, and
    ``QUAD_VECTORS``: 1 or 2 accumulators of 16 lanes per channel) change no result."""
    monkeypatch.setattr(int8_shape, "QUAD_MR", quad_mr)
    monkeypatch.setattr(int8_shape, "QUAD_VECTORS", vectors)
    calls = _spy_on_quads(monkeypatch)
    options = {"int8_dot": "quads", "threads": threads, "parallel_work": 0, "cache": False}
    for case in _TILE_CASES:
        kind, x_shape, w_shape, source, attrs = _CASES[case]
        m, inputs = integer_layer(rng, kind, x_shape, w_shape, source, weight_low=-128, **attrs)
        expected = glow_core.compile(m, "interpreter").run(inputs)["out"]
        got = glow_core.compile(m, "cpu", options=options).run(inputs)["out"]
        np.testing.assert_array_equal(got, expected, err_msg=case)
    assert len(calls) >= len(_TILE_CASES)


def test_a_quad_tile_of_three_vectors_is_refused(monkeypatch):
    monkeypatch.setattr(int8_shape, "QUAD_VECTORS", 3)
    with pytest.raises(ValueError, match="QUAD_VECTORS is 3"):
        int8_shape.quad_tile_positions(24)


def test_avx512_register_files_take_two_vectors_per_channel():
    """The tile measured fastest on a VNNI Xeon (8 channels x 2 zmm) where 24 accumulators fit,
    one vector per channel on smaller register files (AVX-VNNI's 16 ymm)."""
    assert (int8_shape.quad_mr(24), int8_shape.quad_vectors(24)) == (8, 2)
    assert int8_shape.quad_tile_positions(24) == 32
    assert int8_shape.quad_vectors(8) == 1 and int8_shape.quad_tile_positions(8) == 16


def test_pairs_and_quads_agree_and_auto_follows_the_target(monkeypatch, rng):
    m, inputs = integer_layer(
        rng, "QuantizedConv", (1, 10, 7, 7), (12, 10, 3, 3), pads=(1, 1, 1, 1), input_offset=5
    )
    calls = _spy_on_quads(monkeypatch)
    results = {}
    for dot in ("pairs", "quads", "auto"):
        calls.clear()
        cpu = glow_core.compile(m, "cpu", options={"int8_dot": dot, "cache": False, "threads": 1})
        results[dot] = cpu.run(inputs)["out"]
        assert bool(calls) == (dot == "quads" or (dot == "auto" and HOST_VNNI > 0)), dot
    np.testing.assert_array_equal(results["pairs"], results["quads"])
    np.testing.assert_array_equal(results["pairs"], results["auto"])


def test_the_option_is_validated_and_keyed():
    from glow_cpu.backend import CpuOptions, cache_key

    with pytest.raises(ValueError, match="int8_dot"):
        CpuOptions(int8_dot="vnni")
    m, _ = integer_layer(np.random.default_rng(0), "QuantizedFullyConnected", (1, 8), (8, 4))
    ir = compile_stages(load_model(m), glow_core.plugins.get_backend("cpu"), stop_before="codegen").ir
    keys = {cache_key(ir, CpuOptions(int8_dot=dot), "t") for dot in ("auto", "pairs", "quads")}
    assert len(keys) == 3


def test_choose():
    assert choose("auto", 0) == Choice(quads=False, vnni_bits=0)
    assert choose("auto", 512) == Choice(quads=True, vnni_bits=512)
    assert choose("pairs", 256) == Choice(quads=False, vnni_bits=256)
    assert choose("quads", 0) == Choice(quads=True, vnni_bits=0)


@pytest.mark.parametrize(
    ("triple", "features", "cpu", "bits"),
    [
        ("x86_64-unknown-linux-gnu", "+avx2,+fma,+avx512f,+avx512vnni,+avx512vl", "", 512),
        ("x86_64-unknown-linux-gnu", "+avx2,+avxvnni,-avx512f", "", 256),
        ("x86_64-unknown-linux-gnu", "+avx2,+fma,-avx512vnni,-avxvnni", "", 0),
        ("x86_64-unknown-linux-gnu", "", "emeraldrapids", 512),
        ("x86_64-unknown-linux-gnu", "", "alderlake", 256),
        ("x86_64-unknown-linux-gnu", "", "skylake-avx512", 0),
        ("x86_64-unknown-linux-gnu", "", "znver3", 0),
        ("aarch64-linux-gnu", "+avx512vnni", "", 0),
    ],
)
def test_vnni_bits(triple, features, cpu, bits):
    assert vnni_bits(triple, features, cpu) == bits


@pytest.mark.parametrize(
    ("name", "shape", "params"),
    [
        ("int8_quad_panels", (18, 33, 1, 1), {"group": 1, "mr": 8}),
        ("int8_quad_panels", (40, 6, 3, 3), {"group": 2, "mr": 4}),
        ("int8_fc_quad_panels", (37, 19), {"mr": 8}),
    ],
)
def test_quad_panels_hold_the_weights_in_quads(name, shape, params, rng):
    """Sizes as code generation places them, and the layout the micro-kernel reads: per
    group and panel [quads, mr, 4] signed bytes (zeros past K and past the channels), then
    the int32 weight sums."""
    value = rng.integers(-128, 128, shape).astype(np.int8)
    packed = pack(name, value, params)
    assert packed_nbytes(name, shape, params) == packed.nbytes
    filt = value if name == "int8_quad_panels" else value.T[:, :, None, None]
    group, mr = params.get("group", 1), params["mr"]
    rows = filt.reshape(group, filt.shape[0] // group, -1)
    depth, cout_g = rows.shape[2], rows.shape[1]
    quads, panels = -(-depth // 4), -(-cout_g // mr)
    body = packed[: group * panels * quads * mr * 4].view(np.int8).reshape(group, panels, quads, mr, 4)
    for g in range(group):
        for channel in range(cout_g):
            panel, r = divmod(channel, mr)
            weights = body[g, panel, :, r, :].reshape(-1)
            np.testing.assert_array_equal(weights[:depth], rows[g, channel])
            assert not weights[depth:].any()
    sums = packed[group * panels * quads * mr * 4 :].view(np.int32).reshape(group, panels * mr)
    np.testing.assert_array_equal(sums[:, :cout_g], rows.sum(axis=2, dtype=np.int32))
    assert not sums[:, cout_g:].any()


# ---- dot4: the instruction's meaning -------------------------------------------------------

_DOT_FORMS = [0] + ([HOST_VNNI] if HOST_VNNI else [])
"""Generic IR always; the instruction too where this host executes it."""


@pytest.mark.parametrize("bits", _DOT_FORMS)
@pytest.mark.parametrize("lanes", [8, 16])
def test_dot4_is_vpdpbusd(rng, bits, lanes):
    """``acc + sum of 4 u8 x s8 products`` per lane, against numpy in int64, on random bytes
    with the extreme ones (255 x -128) and a lane sum that wraps int32 as the instruction
    does (no saturation)."""
    vec = ir.VectorType(I32, lanes)
    module = ir.Module(name="dot4")
    module.triple = host_target().triple
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * 4), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with int8_dot.chosen(Choice(quads=True, vnni_bits=bits)):
        acc, u, s = (b.load(fn.args[i], typ=vec, align=4) for i in range(3))
        b.store(dot4(b, acc, u, s), fn.args[3], align=4)
    b.ret_void()
    loaded = LoadedObject(compile_object(str(module), host_target()), host_target())
    call = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4)(loaded.function("f"))
    u8 = rng.integers(0, 256, (lanes, 4)).astype(np.uint8)
    s8 = rng.integers(-128, 128, (lanes, 4)).astype(np.int8)
    u8[0], s8[0] = 255, -128
    u8[1], s8[1] = 255, 127
    acc = rng.integers(-(2**31), 2**31, lanes).astype(np.int32)
    acc[2] = 2**31 - 1
    u8[2], s8[2] = 255, 127
    out = np.zeros(lanes, np.int32)
    call(acc.ctypes.data, u8.ctypes.data, s8.ctypes.data, out.ctypes.data)
    want = acc.astype(np.int64) + (u8.astype(np.int64) * s8.astype(np.int64)).sum(axis=1)
    want = ((want + 2**31) % 2**32 - 2**31).astype(np.int32)  # wraps, like vpdpbusd
    np.testing.assert_array_equal(out, want)


# ---- the instruction in the assembly (compiled for other CPUs, never run) ------------------

_CHILD = """
import json, sys
import numpy as np
import glow_core
from glow_conformance.quantized_models import integer_layer
from glow_core.runtime.pipeline import compile_stages, load_model
from glow_cpu.bundle import object_target
from glow_cpu.codegen import build_program
from glow_cpu.jit import assembly
from glow_cpu.kernels import int8_dot, int8_shape
from glow_cpu.registers import register_file, vnni_bits

cpu, option = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:  # a quad tile other than the default: channels, accumulator vectors
    int8_shape.QUAD_MR, int8_shape.QUAD_VECTORS = int(sys.argv[3]), int(sys.argv[4])
target = object_target(None, cpu)
counts = {}
for kind, x, w, attrs in (
    ("QuantizedConv", (1, 16, 6, 6), (16, 16, 3, 3), {"pads": (1, 1, 1, 1), "input_offset": -3}),
    ("QuantizedFullyConnected", (2, 40), (40, 24), {}),
):
    m, _ = integer_layer(np.random.default_rng(0), kind, x, w, **attrs)
    ir = compile_stages(load_model(m), glow_core.plugins.get_backend("cpu"), stop_before="codegen").ir
    registers = register_file(target.triple, target.features, target.cpu)
    choice = int8_dot.choose(option, vnni_bits(target.triple, target.features, target.cpu))
    with int8_dot.chosen(choice):
        program = build_program(ir, 1, False, 0, registers)
    text = "".join(assembly(llvm_ir, target) for _, llvm_ir in program.modules)
    counts[kind] = {op: text.count(op) for op in ("vpdpbusd", "{vex}", "zmm", "vpmaddwd", "vpdpwssd")}
print(json.dumps(counts))
"""


def _compiled_for(cpu: str, option: str = "auto", tile: tuple[int, int] = ()) -> dict[str, dict[str, int]]:
    command = [sys.executable, "-c", _CHILD, cpu, option, *map(str, tile)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, f"compiling for {cpu} failed (rc {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.machine() != "x86_64", reason="cross-compiles x86 CPUs from an x86 host")
@pytest.mark.parametrize("cpu", ["icelake-server", "emeraldrapids"])
def test_avx512_vnni_cpus_get_vpdpbusd_on_zmm(cpu):
    for kind, counts in _compiled_for(cpu).items():
        assert counts["vpdpbusd"] > 0, (kind, counts)
        assert counts["zmm"] > 0 and counts["{vex}"] == 0, (kind, counts)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="cross-compiles x86 CPUs from an x86 host")
@pytest.mark.parametrize(("cpu", "tile"), [("emeraldrapids", (12, 2)), ("icelake-server", (4, 2))])
def test_wide_quad_tiles_compile_for_avx512_vnni_cpus(cpu, tile):
    """The tiles bench/int8_tiles.py --quads sweeps on a VNNI machine build there: 12
    channels x 2 zmm accumulators (24 of the 32 registers), and a narrow, wide tile."""
    for kind, counts in _compiled_for(cpu, "auto", tile).items():
        assert counts["vpdpbusd"] > 0 and counts["zmm"] > 0, (kind, counts)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="cross-compiles x86 CPUs from an x86 host")
def test_avx_vnni_cpus_get_the_vex_vpdpbusd_and_pairs_can_be_forced():
    for kind, counts in _compiled_for("alderlake").items():
        assert counts["vpdpbusd"] > 0 and counts["{vex}"] > 0 and counts["zmm"] == 0, (kind, counts)
    for kind, counts in _compiled_for("sapphirerapids", "pairs").items():
        # The pairs' multiply-add becomes vpdpwssd (VNNI's int16 pairs) where VNNI exists.
        assert counts["vpdpbusd"] == 0 and counts["vpmaddwd"] + counts["vpdpwssd"] > 0, (kind, counts)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="checks x86 instruction selection")
def test_this_host_gets_vpdpbusd_exactly_when_it_has_vnni(rng):
    """``auto`` on the host: the instruction if it has VNNI (``vnni_bits``), else the pairs
    (and never the generic quads, slower than ``vpmaddwd``)."""
    from glow_cpu.jit import assembly

    m, _ = integer_layer(rng, "QuantizedConv", (1, 16, 6, 6), (16, 16, 3, 3), pads=(1, 1, 1, 1))
    ir = compile_stages(load_model(m), glow_core.plugins.get_backend("cpu"), stop_before="codegen").ir
    with int8_dot.chosen(choose("auto", HOST_VNNI)):
        program = build_program(ir, 1, False, 0)
    text = "".join(assembly(llvm_ir, host_target()) for _, llvm_ir in program.modules)
    assert ("vpdpbusd" in text) == (HOST_VNNI > 0)
    assert ("vpmaddwd" in text) == (HOST_VNNI == 0)
