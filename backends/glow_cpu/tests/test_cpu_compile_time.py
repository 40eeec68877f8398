"""What keeps a cold compile short without changing the code it makes (docs/performance.md,
"Cold compile time: loop hints and largest module first").

- The dense convolution kernels (Winograd, blocked direct, GEMM) are explicit vector code:
  their loops tell LLVM's unroller and loop vectorizer to stay off
  (``loops.explicit_vector_loops``); kernels written as scalar loops (depthwise,
  element-wise) keep both, as their speed depends on them.
- The compile pool takes the largest waiting module first (``jit.ModuleCompiler``).
- The body's module is queued as soon as it is emitted (``backend._compile_cold``); the
  weights are packed once LLVM is done and its code pages are handed back, which costs the
  overlap of packing with LLVM's tail but keeps the packed region off the compile's peak
  (``backend.CpuBackend.compile``, docs/performance.md "Footprint, round four").
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from glow_cpu import backend, jit
from glow_cpu.backend import CpuBackend
from glow_cpu.codegen import build_program
from glow_cpu.loops import explicit_vector_loops, for_range
from glow_cpu.registers import register_file
from llvmlite import ir

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import compile_stages

UNROLL_OFF = '!"llvm.loop.unroll.disable"'
VECTORIZE_OFF = '!"llvm.loop.vectorize.enable", i1 0'


def _loop_text(explicit: bool, vectorize: bool = True) -> str:
    module = ir.Module(name="m")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if explicit:
        with explicit_vector_loops(), for_range(b, fn.args[0], vectorize=vectorize):
            pass
    else:
        with for_range(b, fn.args[0], vectorize=vectorize):
            pass
    b.ret_void()
    return str(module)


def test_explicit_vector_loops_turn_off_unroller_and_vectorizer():
    marked = _loop_text(explicit=True)
    assert UNROLL_OFF in marked and VECTORIZE_OFF in marked
    assert "!llvm.loop" in marked
    # Outside the block a loop is LLVM's to transform; vectorize=False alone leaves unrolling.
    assert "llvm.loop" not in _loop_text(explicit=False)
    scalar = _loop_text(explicit=False, vectorize=False)
    assert VECTORIZE_OFF in scalar and UNROLL_OFF not in scalar


def _modules(name: str) -> dict[str, str]:
    stages = compile_stages(MODELS[name](), CpuBackend(), verify_each=False)
    target = jit.host_target()
    registers = register_file(target.triple, target.features, target.cpu)
    return dict(build_program(stages.ir, 1, False, registers=registers).modules)


def test_dense_convolutions_are_marked_and_scalar_kernels_are_not(registry):
    modules = _modules("mobilenetv2_block")
    convolutions = {name: text for name, text in modules.items() if "(Convolution" in name}
    dense = [text for text in convolutions.values() if UNROLL_OFF in text]
    # The block's 1x1 expand and project convolutions are GEMMs; its 3x3 is depthwise.
    assert len(dense) >= 2, sorted(convolutions)
    assert len(dense) < len(convolutions), "the depthwise convolution keeps LLVM's loop passes"
    others = [name for name, text in modules.items() if "(Convolution" not in name and UNROLL_OFF in text]
    assert not others


def test_marked_model_matches_onnxruntime(registry):
    """ResNet's bottleneck (GEMM and 3x3 convolutions, all marked) against onnxruntime."""
    model = MODELS["resnet_bottleneck"]()
    feeds = random_inputs(model, seed=11)
    compiled = glow_core.compile(model, backend="cpu", options={"cache": False, "threads": 1})
    got = compiled.run(feeds)
    want = onnxruntime_outputs(model, feeds)
    assert all(np.abs(expected).max() > 0 for expected in want.values())
    assert max_relative_error(got, want) < 1e-4


def test_pool_takes_the_largest_waiting_module_first(monkeypatch):
    started: list[str] = []
    gate, first = threading.Event(), threading.Event()

    def fake_compile(text: str, name: str, target: object) -> bytes:
        started.append(name)
        first.set()
        assert gate.wait(30)
        return name.encode()

    monkeypatch.setattr(jit, "_compile_module", fake_compile)
    sizes = {"a": 10, "b": 300, "c": 50, "d": 2000, "e": 700}
    modules = [(name, "x" * size) for name, size in sizes.items()]
    with jit.ModuleCompiler(jit.host_target(), threads=2) as compiler:
        compiler.pool.shutdown()
        compiler.pool = ThreadPoolExecutor(1)  # one worker: the order it takes them is exact
        compiler.submit(*modules[0])
        assert first.wait(30)  # "a" holds the worker while the others queue up
        for module in modules[1:]:
            compiler.submit(*module)
        gate.set()
        objects = compiler.objects(modules)
    assert objects == [name.encode() for name in sizes]
    assert started == ["a", "d", "e", "b", "c"]


def test_winograd_scratch_accesses_carry_their_scopes(registry):
    """The Winograd transforms' loads and stores name their scratch buffer's scope and the
    others as not aliased (``winograd.Scopes``), so LLVM's loop-access analysis does not
    compare every load with every store of a transform."""
    winograd = [text for text in _modules("resnet_bottleneck").values() if '!"glow.winograd.xb"' in text]
    assert winograd, "the bottleneck's 3x3 convolution is a Winograd kernel"
    text = winograd[0]
    for buffer in ("xb", "v", "products", "rows"):
        assert f'!"glow.winograd.{buffer}"' in text
    tagged = [line for line in text.splitlines() if "!alias.scope" in line]
    assert tagged and all("!noalias" in line for line in tagged)
    assert any(line.lstrip().startswith("store") for line in tagged)
    assert any(" = load" in line for line in tagged)


def test_the_weights_are_packed_once_llvm_is_done_and_its_pages_are_back(monkeypatch, registry):
    """The order that keeps the compile's peak down (docs/performance.md, "Footprint, round
    four"): every module's object, then MCJIT's load, then LLVM's code pages handed back,
    then the constant region filled, so the packed weights never share the process with
    LLVM's code and working memory; the pages MCJIT's symbol lookups touch go back after
    them. The body's module is still queued with the kernels'."""
    events: list[str] = []
    submitted: list[str] = []
    objects, loaded, region, submit = (
        jit.ModuleCompiler.objects,
        backend.LoadedObject,
        backend.constant_region,
        jit.ModuleCompiler.submit,
    )
    release = jit.release_file_pages

    def recorded_objects(self: jit.ModuleCompiler, modules: list[tuple[str, str]]) -> list[bytes]:
        events.append("submitted the body" if any(n.startswith("the body") for n in submitted) else "no body")
        result = objects(self, modules)
        events.append("objects")
        return result

    def recorded_load(*args: object) -> jit.LoadedObject:
        result = loaded(*args)
        events.append("loaded")
        return result

    def recorded_release(path: object) -> int:
        events.append("released")
        return release(path)

    def recorded_region(*args: object) -> np.ndarray:
        events.append("packed")
        return region(*args)

    def recorded_submit(self: jit.ModuleCompiler, name: str, llvm_ir: str) -> None:
        submitted.append(name)
        submit(self, name, llvm_ir)

    monkeypatch.setattr(jit.ModuleCompiler, "objects", recorded_objects)
    monkeypatch.setattr(backend, "LoadedObject", recorded_load)
    monkeypatch.setattr(jit, "release_file_pages", recorded_release)
    monkeypatch.setattr(backend, "constant_region", recorded_region)
    monkeypatch.setattr(jit.ModuleCompiler, "submit", recorded_submit)
    model = MODELS["resnet_bottleneck"]()
    feeds = random_inputs(model, seed=5)
    options = {"cache": False, "threads": 1, "compile_threads": 2}
    compiled = glow_core.compile(model, backend="cpu", options=options)
    # The first compile of the process releases on its way in too (what the import made
    # resident), and MCJIT's symbol lookups for the function are one more use of LLVM.
    body = events.index("submitted the body")
    assert set(events[:body]) <= {"released"}
    assert events[body:] == ["submitted the body", "objects", "loaded", "released", "packed", "released"]
    assert max_relative_error(compiled.run(feeds), onnxruntime_outputs(model, feeds)) < 1e-4


def test_a_program_too_small_to_share_is_prepared_once(monkeypatch, registry):
    """Asked for two threads, a program with too little parallel work is emitted again for
    one (``build_program``): the second pass reuses the fusion plan, arguments and kernel
    keys of the first, and gives exactly the one-thread program."""
    from glow_cpu import codegen

    stages = compile_stages(MODELS["mlp"](), CpuBackend(), verify_each=False)
    target = jit.host_target()
    registers = register_file(target.triple, target.features, target.cpu)
    alone = build_program(stages.ir, 1, False, registers=registers)
    plans = []
    original = codegen.plan_fusion
    monkeypatch.setattr(codegen, "plan_fusion", lambda ir_fn: plans.append(ir_fn) or original(ir_fn))
    huge = 1 << 60  # more parallel work than any program has: always the fallback
    shared = build_program(stages.ir, 2, False, parallel_work=huge, registers=registers)
    assert len(plans) == 1
    assert shared.modules == alone.modules
    assert shared.steps == alone.steps and shared.kernels == alone.kernels
