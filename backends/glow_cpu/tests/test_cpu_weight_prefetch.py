"""A product whose B is a weight packed at compile time asks for the next column panel of B
while it computes the current one (``gemm_tile._prefetches_b``): each row panel takes its
share of the next panel's lines at every k, so the weight streams from memory under the
FMAs instead of stalling the first tile of every panel. A prefetch is a hint and changes no
result; these tests check that the hint is emitted where it should be and that products of
every row-panel count (a GEMV, fewer row panels than lines a k, many) stay exact against
float64, on 1 and 2 threads, with the runtime's poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.codegen import build_program
from glow_cpu.kernels import gemm_tile
from glow_cpu.kernels.gemm_shape import tile_for
from glow_cpu.registers import AVX2, AVX512, RegisterFile

import glow_core
from glow_core.accuracy import relative_error
from glow_core.graph import Module
from glow_core.runtime.pipeline import compile_stages


def _dense(rng: np.random.Generator, m: int, depth: int, n: int) -> tuple[Module, np.ndarray]:
    """``y = x @ w`` with ``w`` a [depth, n] constant, and the weight."""
    module = Module()
    b = module.create_function().builder()
    x = b.placeholder("x", (m, depth))
    weight = (rng.standard_normal((depth, n)) / np.sqrt(depth)).astype(np.float32)
    b.save(b.matmul(x, b.constant(weight, "w")), "y")
    return module, weight


def _prefetches(module: Module, registers: RegisterFile = AVX512) -> int:
    """``llvm.prefetch`` calls in the program's code (one thread, ``registers``' tiles)."""
    program = build_program(compile_stages(module, CpuBackend()).ir, 1, False, 0, registers)
    return program.llvm_ir.count("call void @llvm.prefetch")


@pytest.mark.parametrize("m", [1, 2, 64])
def test_a_weight_products_tiles_prefetch_the_next_panel(m, rng, monkeypatch):
    """With B a weight of several panels the main tile prefetches at every k; turned off,
    those prefetches are gone. A product one row panel tall takes every line of a k."""
    module, _ = _dense(rng, m, 96, 300)
    with_hint = _prefetches(module)
    monkeypatch.setattr(gemm_tile, "PREFETCH_B", False)
    without = _prefetches(module)
    mr, nr = tile_for(m, 300, accumulators=24)
    lines = nr * 4 // 64
    per_k = -(-lines // -(-m // mr))
    assert with_hint - without >= per_k, (with_hint, without)


def test_a_single_panel_weight_prefetches_nothing(rng, monkeypatch):
    """B of one panel has no next panel to ask for."""
    module, _ = _dense(rng, 64, 96, 32)
    with_hint = _prefetches(module)
    monkeypatch.setattr(gemm_tile, "PREFETCH_B", False)
    assert _prefetches(module) == with_hint


def test_an_eight_lane_target_leaves_prefetching_to_the_hardware(rng, monkeypatch):
    """AVX2 was not measured with the hint: its products emit none."""
    module, _ = _dense(rng, 64, 96, 300)
    with_hint = _prefetches(module, AVX2)
    monkeypatch.setattr(gemm_tile, "PREFETCH_B", False)
    assert _prefetches(module, AVX2) == with_hint


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("m", "depth", "n"), [(1, 1280, 1000), (3, 300, 200), (130, 256, 1024), (64, 700, 97)]
)
def test_products_with_prefetched_weights_match_float64(m, depth, n, threads, rng):
    """A GEMV (one row panel takes every line), fewer row panels than lines a k, many row
    panels with a last partial column panel, and two K blocks: all within the float32
    tolerance of a float64 product."""
    module, weight = _dense(rng, m, depth, n)
    x = rng.standard_normal((m, depth)).astype(np.float32)
    options = CpuOptions(threads=threads, cache=False)
    got = glow_core.compile(module, backend=CpuBackend(), options=options).run({"x": x})["y"]
    want = x.astype(np.float64) @ weight.astype(np.float64)
    assert np.isfinite(got).all()
    assert relative_error(got, want) < 1e-5
