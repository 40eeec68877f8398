"""Register tiles sized from the target's vector register file (glow_cpu/registers.py).

An AVX-512 tile (24 accumulators of 16 lanes) on an AVX2 target needs 48 ymm registers and
spills at every step of k; the AVX2 tiles keep their accumulators in the 16 ymm. Both
families of tiles must compute the same products on any host (a wider file only changes the
blocking), so the numerical tests run each file's tiles here, whatever this CPU has."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from cpu_cases import conv_model
from glow_cpu import backend as cpu_backend
from glow_cpu.backend import CpuBackend
from glow_cpu.codegen import build_program
from glow_cpu.jit import HostTarget, _machine, assembly, host_target
from glow_cpu.registers import AVX2, AVX512, NEON, SSE, register_file

import glow_core
from glow_core.accuracy import relative_error
from glow_core.runtime.pipeline import compile_stages

# (batch, channels, height, width, out channels, kernel, stride, pad, group): the implicit
# GEMM (1x1), Winograd (3x3 stride 1), the phase-split GEMM (stride 2, 16 does not divide the
# channels), row panels that do not divide by 6 (an AVX2 tile's rows), and the blocked direct
# kernel (3x3 stride 2, 16 | channels); rows of 21 and 9 pixels and 24 channels leave partial
# 8 x 8 tiles when the input is blocked.
LAYERS = [
    (1, 64, 14, 14, 80, 1, 1, 0, 1),
    (2, 32, 12, 13, 48, 3, 1, 1, 1),
    (1, 24, 17, 15, 40, 3, 2, 1, 1),
    (1, 3, 19, 21, 13, 5, 1, 2, 1),
    (1, 32, 11, 21, 32, 3, 2, 1, 1),
    (1, 24, 10, 9, 16, 3, 1, 1, 1),
]


def test_the_register_file_is_read_from_the_target():
    assert register_file("x86_64-unknown-linux-gnu", "+sse2,+avx,+avx2,+fma,-avx512f") == AVX2
    assert register_file("x86_64-unknown-linux-gnu", "+avx,+avx2,+avx512f,+avx512bw") == AVX512
    assert register_file("x86_64-linux-gnu", "", "znver4") == AVX512  # a bundle's --cpu alone
    assert register_file("x86_64-linux-gnu", "", "haswell") == AVX2
    assert register_file("x86_64-linux-gnu", "", "generic") == SSE  # plain x86-64: SSE2
    assert register_file("aarch64-linux-gnu", "") == NEON
    assert (AVX512.accumulators, AVX2.accumulators, NEON.accumulators, SSE.accumulators) == (24, 6, 6, 3)


@pytest.mark.parametrize("registers", [AVX512, AVX2, SSE], ids=["avx512", "avx2", "sse"])
@pytest.mark.parametrize("shape", LAYERS, ids=lambda s: "x".join(map(str, s)))
def test_every_register_file_computes_the_same_convolution(shape, registers, monkeypatch, tmp_path):
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_backend, "register_file", lambda *target: registers)
    seed = sum(shape) * 7 + registers.accumulators
    model, feeds, last = conv_model(shape, "bias_relu", seed)
    got = glow_core.compile(model, backend="cpu").run(feeds)[last]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert relative_error(got, session.run(None, feeds)[0]) < 1e-5


def _haswell_assembly(shape, epilogue: str = "bias_relu", registers=AVX2) -> str:
    """The x86 assembly of ``conv_model(shape, epilogue)``'s program for a Haswell (AVX2) CPU,
    its tiles sized for ``registers``."""
    model, _, _ = conv_model(shape, epilogue, 0)
    stages = compile_stages(model, CpuBackend())
    host = host_target()
    haswell = HostTarget(_machine(host.triple, "haswell", ""), host.triple, "haswell", "")
    return assembly(build_program(stages.ir, 1, False, registers=registers).llvm_ir, haswell)


def _stack_moves(asm: str) -> int:
    """Vector moves to or from the stack in ``asm``."""
    return len(re.findall(r"vmov\w+\s+[^\n]*\(%rsp\)", asm))


def _stack_moves_and_fmas(shape, registers) -> tuple[int, int]:
    """Vector moves to or from the stack and FMAs in the code for a Haswell (AVX2) CPU."""
    asm = _haswell_assembly(shape, registers=registers)
    return _stack_moves(asm), len(re.findall(r"vfmadd", asm))


@pytest.mark.skipif(not host_target().triple.startswith("x86_64"), reason="checks x86 assembly")
def test_avx2_gemm_tiles_keep_their_accumulators_in_registers():
    """The 1x1 layer is one implicit GEMM: with AVX-512's 8 x 48 tile an AVX2 CPU spills
    more than one vector per FMA; with the AVX2 tile (5 x 16) almost nothing."""
    shape = (1, 256, 14, 14, 128, 1, 1, 0, 1)
    wide_moves, wide_fmas = _stack_moves_and_fmas(shape, AVX512)
    moves, fmas = _stack_moves_and_fmas(shape, AVX2)
    assert wide_moves > wide_fmas  # the test sees spills where there are some
    assert moves < 0.25 * fmas, (moves, fmas)


@pytest.mark.skipif(not host_target().triple.startswith("x86_64"), reason="checks x86 assembly")
def test_avx2_gemm_inner_loop_spills_nothing():
    """MobileNetV2's 96 -> 576 1x1 layer on a 14x14 plane: the blocks of the inner k loop
    (those with the tile's FMAs) move no vector to or from the stack. A 6 x 16 tile filled
    the 16 ymm registers exactly and LLVM, loading B a step ahead, spilled an accumulator."""
    asm = _haswell_assembly((1, 96, 14, 14, 576, 1, 1, 0, 1))
    hot = [block for block in re.split(r"\n\.LBB\w+:", asm) if block.count("vfmadd") >= 8]
    assert hot, "no inner loop found"
    assert sum(_stack_moves(block) for block in hot) == 0


@pytest.mark.skipif(not host_target().triple.startswith("x86_64"), reason="checks x86 assembly")
@pytest.mark.parametrize("shape", [(1, 64, 56, 56, 64, 3, 2, 1, 1), (1, 64, 56, 56, 64, 3, 1, 1, 1)])
def test_avx2_transposes_spill_nothing(shape):
    """The blocked direct (stride 2) and Winograd (stride 1) convolutions block their input
    16 channels x 16 pixels at a time and turn their output back into rows of pixels,
    through the epilogue (here bias and ReLU); on AVX2 both as 8 x 8 transposes. The
    blocking loop moves no vector to or from the stack (one 16 x 16 transpose of 16-lane
    vectors moved 170), and no loop with the epilogue's transposes more than a few dozen (the
    16 x 16 transposes moved 137-158; the Winograd output loop moves 22 with ResNet-50's
    2-row units of this layer, 6 with the 5-row units before ``winograd.SMALL_FILTER``)."""
    asm = _haswell_assembly(shape)
    blocks = [b for b in re.split(r"\n(?=\.LBB\w+:)", asm) if "vfmadd" not in b]
    blocking = [b for b in blocks if "vmaxps" not in b and len(re.findall(r"vunpck|vperm2f128", b)) >= 48]
    output = [b for b in blocks if "vmaxps" in b and len(re.findall(r"vunpck", b)) >= 32]
    assert blocking, "no blocking loop found"
    assert sum(_stack_moves(block) for block in blocking) == 0
    assert all(_stack_moves(block) <= 32 for block in output)


def test_constants_of_gemm_tiles_stay_consistent_with_packing(rng, monkeypatch, tmp_path):
    """A MatMul with a constant operand packs it for the tile it will run: the packing and
    the tile must come from the same register file (a mismatch reads the wrong panels)."""
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_backend, "register_file", lambda *target: AVX2)
    from cpu_cases import dense_block

    module = dense_block(rng, 13, 37, 29, "Relu")
    x = rng.standard_normal((13, 37)).astype(np.float32)
    got = glow_core.compile(module, backend="cpu").run({"x": x})["y"]
    want = glow_core.compile(module, backend="interpreter").run({"x": x})["y"]
    assert relative_error(got, want) < 1e-5


def test_only_avx512_stores_a_strided_convolution_compressed():
    """A phase-split convolution with a per-channel epilogue stores its output compressed on
    AVX-512 (one ``vcompressps`` a vector); a file without the instruction gets the scratch
    and drop pass instead: LLVM expands the compress lane by lane through the stack (on AVX2
    MobileNetV2's first layer 6.4 ms instead of 1.3)."""
    model, _, _ = conv_model((1, 3, 30, 30, 32, 3, 2, 1, 1), "bias_relu", 0)
    stages = compile_stages(model, CpuBackend())
    compressing = {
        registers: "vector.compress" in build_program(stages.ir, 1, False, registers=registers).llvm_ir
        for registers in (AVX512, AVX2, NEON, SSE)
    }
    assert compressing == {AVX512: True, AVX2: False, NEON: False, SSE: False}


def _loop_bodies(asm: str) -> list[str]:
    """The instructions from each label to the branch back to it: the loops of ``asm``."""
    bodies = []
    for match in re.finditer(r"\n(\.LBB\w+):", asm):
        label = match.group(1)
        back = re.search(rf"\n\tj\w+\t{re.escape(label)}\n", asm[match.end() :])
        if back is not None:
            bodies.append(asm[match.end() : match.end() + back.start()])
    return bodies


@pytest.mark.skipif(not host_target().triple.startswith("x86_64"), reason="checks x86 assembly")
def test_avx2_edge_tile_loops_spill_nothing():
    """MobileNetV2's first convolution (3 -> 32 channels, 3x3 stride 2): 32 rows are 6 row
    panels of 5 and one of 2, whose tile sums k over independent accumulator sets. Three
    sets were twelve ymm accumulators, which with B loaded a step ahead outgrew the 16 ymm:
    seven stack moves per iteration. Within ``live_accumulators`` no k loop spills."""
    asm = _haswell_assembly((1, 3, 30, 30, 32, 3, 2, 1, 1), "bias_clip")
    loops = [body for body in _loop_bodies(asm) if body.count("vfmadd") >= 4]
    assert len(loops) >= 2, "no main and edge tile loops found"
    assert [len(re.findall(r"\(%rsp\)", body)) for body in loops] == [0] * len(loops)
