"""Where one cold glow-cpu compile spends its time: per pipeline stage and inside codegen.

Run it as its own process (nothing imported or cached before it starts); the object cache
is off. It prints wall and CPU seconds of the whole compile (every thread of the process)
and, per stage, wall seconds and the CPU seconds of the thread that ran it (summed over its
calls, so LLVM stages on a pool add up to more than their wall time) of

- each top-level pipeline step (ONNX import, graph passes, lowering, scheduling, IRGen...),
  as the pipeline runner times them;
- inside the cpu backend's codegen: Python emitting the LLVM IR (``build_program``, its
  text printing counted apart), LLVM parsing + verifying, LLVM optimization, machine code
  generation and object loading (MCJIT), summed over every module;
- with ``--kernels N``, the N LLVM modules that took longest (parse to object code, CPU
  time of the thread that compiled it), named by the kernel they hold;
- with ``--cprofile N``, the N functions with the most cumulative time (cProfile).

    .venv/bin/python bench/compile_profile.py resnet50 [--compile-threads 1] [--kernels 10]

The stage wrappers are installed around the functions the backend calls, so they time
exactly what a ``glow_core.compile`` does; with several compile threads the LLVM stages
overlap, so their sums exceed the wall time of the codegen step.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import llvmlite.binding as llvm
import onnx
from llvmlite import ir

import glow_core
from glow_core.model_zoo import MODELS
from glow_core.runtime.pipeline import choose_backend, compile_stages

_TOTALS: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
_LOCK = threading.Lock()
_MODULES: list[tuple[float, float, str]] = []  # (thread cpu s, wall s, name) per LLVM module


def _cpu() -> float:
    return time.process_time()


@contextlib.contextmanager
def _timed(stage: str) -> Iterator[None]:
    # The calling thread's CPU time: a stage runs on one thread, and with LLVM on a pool the
    # process's CPU time would count the other threads' concurrent work into every stage.
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        with _LOCK:
            row = _TOTALS[stage]
            row[0] += time.perf_counter() - wall
            row[1] += time.thread_time() - cpu
            row[2] += 1


def _wrap(owner: Any, name: str, stage: str) -> None:
    original: Callable = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        with _timed(stage):
            return original(*args, **kwargs)

    setattr(owner, name, timed)


def _install() -> None:
    """Time the stages of codegen by wrapping what the backend calls."""
    import glow_cpu.backend as backend
    import glow_cpu.jit as jit

    _wrap(backend, "build_program", "emit: Python builds LLVM IR (incl. text)")
    _wrap(ir.Module, "__str__", "emit: of which printing IR text")
    _wrap(llvm, "parse_assembly", "llvm: parse")
    _wrap(llvm.ModuleRef, "verify", "llvm: verify")
    _wrap(jit, "optimize", "llvm: optimize (O3)")
    _wrap(llvm.TargetMachine, "emit_object", "llvm: machine code")
    _wrap(backend, "LoadedObject", "load: MCJIT object loading")
    import glow_cpu.runtime as runtime

    _wrap(runtime, "constant_region", "constants: fill region (packing)")
    if hasattr(backend, "constant_region"):
        _wrap(backend, "constant_region", "constants: fill region (packing)")
    if hasattr(jit, "release_file_pages"):  # LLVM's code pages handed back (llvm_in_use)
        _wrap(jit, "release_file_pages", "memory: LLVM's code pages handed back")
    for owner in (backend, jit):  # malloc_trim after emission, each module, LLVM
        if hasattr(owner, "trim_heap"):
            _wrap(owner, "trim_heap", "memory: heap trims (malloc_trim)")
    unlocked = getattr(jit, "unlocked", None)  # the thread-pool path (one module per kernel)
    if unlocked is not None:
        _wrap(unlocked, "parse", "llvm: parse")
        _wrap(unlocked, "verify", "llvm: verify")
        _wrap(unlocked, "run_pipeline", "llvm: optimize (O3)")
        _wrap(unlocked, "emit_object", "llvm: machine code")
        compile_module = jit._compile_module

        def per_module(text: str, name: str, *args: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return compile_module(text, name, *args)
            finally:
                with _LOCK:
                    _MODULES.append((time.thread_time() - cpu, time.perf_counter() - wall, name))

        jit._compile_module = per_module


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("model")
    parser.add_argument("--compile-threads", type=int, default=None)
    parser.add_argument("--kernels", type=int, default=0, help="list the N slowest LLVM modules")
    parser.add_argument("--cprofile", type=int, default=0, help="list the N top cProfile entries")
    args = parser.parse_args()
    _install()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        onnx.save(MODELS[args.model](), path)
        options: dict[str, Any] = {"cache": False, "threads": 1}
        if args.compile_threads is not None:
            options["compile_threads"] = args.compile_threads
        backend, parsed = choose_backend("cpu", options)
        profiler = cProfile.Profile() if args.cprofile else None
        wall, cpu = time.perf_counter(), _cpu()
        if profiler:
            profiler.enable()
        stages = compile_stages(path, backend, options=parsed, verify_each=False)
        if profiler:
            profiler.disable()
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    compiled = stages.compiled
    print(f"{args.model}: glow {glow_core.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"total: wall {wall:6.2f} s  cpu {cpu:6.2f} s  kernels {getattr(compiled, 'kernel_count', '?')}")
    print("pipeline steps (wall s):")
    for name, seconds in sorted(stages.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:40s} {seconds:7.3f}")
    print("codegen stages (wall s, cpu s, calls):")
    for stage, (w, c, n) in sorted(_TOTALS.items()):
        print(f"  {stage:44s} {w:7.3f} {c:7.3f} {n:5d}")
    if args.kernels and _MODULES:
        print(f"slowest LLVM modules (parse to object: cpu s, wall s) of {len(_MODULES)}:")
        for cpu_s, wall_s, name in sorted(_MODULES, reverse=True)[: args.kernels]:
            print(f"  {cpu_s:7.3f} {wall_s:7.3f}  {name}")
    if profiler:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(args.cprofile)


if __name__ == "__main__":
    main()
