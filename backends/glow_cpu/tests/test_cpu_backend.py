"""The backend's own machinery: fusion, the disk cache, the profile, threads, the entry point."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import dense_block
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.codegen import build_program
from glow_cpu.fusion import plan_fusion
from glow_cpu.jit import assembly, host_target

import glow_core
from glow_core.graph import Module
from glow_core.lowering.evaluate import evaluate
from glow_core.runtime.pipeline import compile_stages


def _conv_block(rng: np.random.Generator) -> Module:
    """relu(conv(x) + bias + x): a bias broadcast, a residual and a ReLU after a convolution."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (2, 8, 9, 11))
    w = b.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w")
    bias = b.constant(rng.standard_normal(8).astype(np.float32), "bias")
    y = b.conv(x, w, bias, pads=(1, 1, 1, 1))
    b.save(b.relu(b.add(y, x)), "y")
    return m


def _mlp_block(rng: np.random.Generator) -> Module:
    """tanh(x @ w + bias) * 0.5 with a constant weight: a MatMul epilogue of three ops."""
    return dense_block(rng, 5, 40, 70)


def _compile(module: Module, **options):
    options.setdefault("parallel_work", 0)
    return glow_core.compile(module, backend=CpuBackend(), options=CpuOptions(**options))


@pytest.mark.parametrize("build", [_conv_block, _mlp_block])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_chains_match_the_graph(build, threads, rng):
    module = build(rng)
    name, ph = next((p.name, p) for p in module.function.inputs)
    x = rng.standard_normal(ph.type.shape).astype(np.float32)
    got = _compile(module, threads=threads).run({name: x})["y"]
    np.testing.assert_allclose(got, evaluate(module, {name: x})["y"], rtol=1e-5, atol=1e-5)


def test_bias_and_relu_fold_into_the_convolution(rng):
    stages = compile_stages(_conv_block(rng), CpuBackend())
    plan = plan_fusion(stages.ir)
    conv = next(i for i in stages.ir.instrs if i.kind == "Convolution")
    assert [op.kind for op in plan.epilogues[id(conv)]] == ["Add", "Add", "Max"]
    assert not any(i.kind in ("Broadcast", "Splat") and id(i) not in plan.skipped for i in stages.ir.instrs)


def _scores_block(rng: np.random.Generator) -> Module:
    """An attention's scores: q @ k scaled by a scalar, plus a mask shared by the entries and
    a bias per entry and row, then a ReLU: a chain of four whose operands are a splat, a
    buffer broadcast along the entries, one constant along the columns, and a splat zero."""
    module = Module()
    b = module.create_function().builder()
    q = b.placeholder("q", (6, 37, 20))
    k = b.placeholder("k", (6, 20, 45))
    mask = b.constant(rng.standard_normal((1, 37, 45)).astype(np.float32), "mask")
    rows = b.constant(rng.standard_normal((6, 37, 1)).astype(np.float32), "rows")
    scores = b.mul(b.matmul(q, k), 0.125)
    b.save(b.relu(b.add(b.add(scores, mask), rows)), "y")
    return module


@pytest.mark.parametrize("threads", [1, 2, 7])
@pytest.mark.parametrize("as_a_pass", [False, True], ids=["at the stores", "as a pass"])
def test_batch_matmul_applies_its_chain(threads, as_a_pass, rng, monkeypatch):
    """A BatchMatMul's element-wise successors are its epilogue (one kernel, no pass over
    the scores), applied as each entry's tiles store, or as a pass of its own where the
    chain cannot be read along the GEMM's columns; 7 threads split each entry's GEMM, 1
    and 2 take whole entries."""
    from glow_cpu.kernels import linalg

    if as_a_pass:
        monkeypatch.setattr(linalg, "tile_epilogue", lambda *args, **kwargs: None)
    module = _scores_block(rng)
    feeds = {
        "q": rng.standard_normal((6, 37, 20)).astype(np.float32),
        "k": rng.standard_normal((6, 20, 45)).astype(np.float32),
    }
    # no disk cache: the patched emitter makes other code under the same key
    compiled = _compile(module, threads=threads, profile=True, cache=False)
    assert [kind for _, kind in compiled.steps] == ["BatchMatMul+Mul+Add+Add+Max"]
    got = compiled.run(feeds)["y"]
    np.testing.assert_allclose(got, evaluate(module, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_second_compile_hits_the_cache(tmp_path, rng):
    module = _conv_block(rng)
    first = _compile(module, cache_dir=str(tmp_path))
    second = _compile(module, cache_dir=str(tmp_path))
    assert not first.cache_hit and second.cache_hit
    assert len(list(tmp_path.glob("*.o"))) == 1
    x = rng.standard_normal((2, 8, 9, 11)).astype(np.float32)
    np.testing.assert_array_equal(first.run({"x": x})["y"], second.run({"x": x})["y"])


def test_cache_can_be_turned_off(tmp_path, rng):
    _compile(_conv_block(rng), cache_dir=str(tmp_path), cache=False)
    assert not list(tmp_path.glob("*"))


def test_profile_times_every_fused_step(rng):
    compiled = _compile(_conv_block(rng), profile=True)
    compiled.run({"x": rng.standard_normal((2, 8, 9, 11)).astype(np.float32)})
    kinds = [row.kind for row in compiled.last_profile]
    assert kinds == ["Convolution+Add+Add+Max"]
    assert all(row.seconds >= 0 for row in compiled.last_profile)
    assert "Convolution+Add+Add+Max" in compiled.profile_table()


def test_outputs_are_poisoned_before_each_run(rng):
    compiled = _compile(_conv_block(rng))
    compiled._entry = lambda *args: None  # a run in which no kernel writes
    got = compiled.run({"x": rng.standard_normal((2, 8, 9, 11)).astype(np.float32)})["y"]
    assert np.isnan(got).all()


def test_kernels_use_512_bit_registers(rng):
    stages = compile_stages(_mlp_block(rng), CpuBackend())
    asm = assembly(build_program(stages.ir, 1, False).llvm_ir, host_target())
    if "+avx512f" not in host_target().features:
        pytest.skip("no AVX-512 on this CPU")
    assert "zmm" in asm


def test_unsupported_kind_is_refused_at_compile_time(rng, monkeypatch):
    """Every declared kind has a kernel today, so one is withdrawn from the emitter table:
    support is read from it, and a kind it lacks is refused before anything runs."""
    from glow_cpu.emit import EMIT, Emitters

    from glow_core.errors import UnsupportedOpError

    float32_only = Emitters("MatMul")
    float32_only.add(EMIT["MatMul"].for_kind(glow_core.ElemKind.float32))
    monkeypatch.setitem(EMIT, "MatMul", float32_only)
    assert CpuBackend().info().supports["MatMul"] == ["float32"]
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (4, 4), glow_core.ElemKind.float16)
    b.save(b.MatMul(x, x), "y")
    with pytest.raises(UnsupportedOpError, match="MatMul"):
        _compile(m)


def test_a_splat_buffer_reused_in_place_is_not_read_as_the_splat(rng):
    """Softplus as ONNX lowers it: max(x, 0) + log(1 + exp(-|x|)). share-buffers lets the
    chain ending in Log write into the splat-1 buffer, so the last Add must read that buffer,
    not the constant 1 (ONNX Softplus, Cosh, Mish... were wrong on cpu before this)."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (3, 4, 5))
    zero, one = b.splat(0.0, x), b.splat(1.0, x)
    negative_abs = b.Sub(zero, b.Max(x, b.Sub(zero, x)))
    log_term = b.Log(b.Add(one, b.Exp(negative_abs)))
    b.save(b.Add(b.Max(x, b.splat(0, x)), log_term), "y")
    value = rng.standard_normal((3, 4, 5)).astype(np.float32)
    got = _compile(m, threads=1).run({"x": value})["y"]
    np.testing.assert_allclose(got, np.logaddexp(0.0, value.astype(np.float64)), rtol=1e-6)
