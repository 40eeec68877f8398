"""Parallel LLVM compilation (``CpuOptions.compile_threads``, ``jit.compile_objects``).

A program is one LLVM module per distinct kernel plus the body's, each compiled in an LLVM
context of its own on a pool of threads. These tests prove what makes that safe to use:
the object code does not depend on the thread count (same bytes, same outputs bit for
bit), two compiles at once in two Python threads both give correct results, and one
module that LLVM refuses is reported by name as a ``GlowError`` instead of hanging the pool.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cases import compile_on_threads
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.codegen import build_program
from glow_cpu.jit import KernelCompileError, compile_objects, host_target
from glow_cpu.registers import register_file

import glow_core
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.errors import GlowError
from glow_core.model_zoo import MODELS, random_inputs
from glow_core.runtime.pipeline import compile_stages

MODEL = "resnet_bottleneck"


def _program(name: str, threads: int = 1):
    stages = compile_stages(MODELS[name](), CpuBackend(), verify_each=False)
    target = host_target()
    registers = register_file(target.triple, target.features, target.cpu)
    return build_program(stages.ir, threads, False, parallel_work=0, registers=registers)


def test_a_program_is_one_module_per_kernel_and_the_body(registry):
    program = _program(MODEL)
    assert len(program.modules) == program.kernels + 1
    assert program.modules[-1][0].startswith("the body")
    assert all(name.startswith("kernel k") for name, _ in program.modules[:-1])


def test_objects_are_the_same_bytes_for_any_thread_count(registry):
    program = _program(MODEL)
    target = host_target()
    serial = compile_objects(program.modules, target, threads=1)
    assert len(serial) == len(program.modules)
    for threads in (2, 5):
        assert compile_objects(program.modules, target, threads=threads) == serial, f"{threads} threads"


@pytest.mark.parametrize("name", ["small_cnn", MODEL])
def test_outputs_bit_equal_across_compile_threads(name, registry):
    model = MODELS[name]()
    feeds = random_inputs(model, seed=3)
    outputs = []
    for compile_threads in (1, 3):
        options = {"cache": False, "threads": 1, "compile_threads": compile_threads}
        outputs.append(glow_core.compile(model, backend="cpu", options=options).run(feeds))
    assert max_relative_error(outputs[0], onnxruntime_outputs(model, feeds)) < 1e-4
    for key in outputs[0]:
        assert np.array_equal(outputs[0][key], outputs[1][key]), f"{name}: {key} differs"


def test_two_compiles_at_once_in_two_threads(registry):
    """Each thread calls the backend itself (``glow_core.compile`` would take turns), with
    two compile threads each, so four LLVM compilations overlap."""
    names = ["small_cnn", MODEL]
    compiled = compile_on_threads(names)
    for name in names:
        model = MODELS[name]()
        feeds = random_inputs(model, seed=5)
        got = compiled[name].run(feeds)
        assert max_relative_error(got, onnxruntime_outputs(model, feeds)) < 1e-4, name


def test_a_module_llvm_refuses_is_named_in_a_glow_error(registry):
    program = _program(MODEL)
    broken = list(program.modules)
    name, text = broken[1]
    broken[1] = (name, text.replace("ret void", "ret i32 0", 1))
    with pytest.raises(KernelCompileError) as caught:
        compile_objects(broken, host_target(), threads=3)
    assert isinstance(caught.value, GlowError)
    assert name in str(caught.value) and "glow-cpu bug" in str(caught.value)
    # The pool is not left broken: the next compile works.
    assert len(compile_objects(program.modules, host_target(), threads=3)) == len(program.modules)


def test_compile_threads_is_not_in_the_cache_key(registry):
    from glow_cpu.backend import cache_key

    ir = compile_stages(MODELS["small_cnn"](), CpuBackend(), verify_each=False).ir
    keys = {cache_key(ir, CpuOptions(compile_threads=n), "host") for n in (1, 4)}
    assert len(keys) == 1


@pytest.mark.parametrize("bound", [0, None])
def test_modules_past_the_quick_bound_compile_unoptimized_and_run_right(bound, monkeypatch, registry):
    """A module whose text passes ``QUICK_MODULE_BYTES`` (an unrolled recurrence's body) is
    compiled at O0; the bound lowered to 0 sends every module of a two-thread program that
    way, and the outputs still match onnxruntime (the code is correct unoptimized too).
    Otherwise the kernels' code is generated at level 3 and the body's at 0 (``DISPATCH``)."""
    from glow_cpu import jit

    if bound is not None:
        monkeypatch.setattr(jit, "QUICK_MODULE_BYTES", bound)
    levels: list[int] = []
    real_machine = jit._thread_machine

    def machine(target, opt=3):
        levels.append(opt)
        return real_machine(target, opt)

    monkeypatch.setattr(jit, "_thread_machine", machine)
    model = MODELS[MODEL]()
    feeds = random_inputs(model, seed=11)
    options = {"cache": False, "threads": 2, "compile_threads": 1}
    got = glow_core.compile(model, backend="cpu", options=options).run(feeds)
    assert max_relative_error(got, onnxruntime_outputs(model, feeds)) < 1e-4
    assert set(levels) == ({0} if bound == 0 else {3, 0})


def test_the_body_alone_compiles_at_the_dispatch_level(registry):
    """The module that defines the entry point (the body: calls, claims, barriers) is
    ``DISPATCH`` (O1, code generation at level 0), every kernel ``FULL``, read from the
    text. (Bodies with a recurrence's loops run at this level in test_cpu_body_loops.py,
    bit-equal to their unrolled form.)"""
    from glow_cpu import jit

    for threads in (1, 2):
        program = _program("mlp", threads)
        levels = {name: jit.module_level(text) for name, text in program.modules}
        body = [name for name in levels if name.startswith("the body")]
        assert len(body) == 1 and levels.pop(body[0]) == jit.DISPATCH
        assert levels and set(levels.values()) == {jit.FULL}
