"""Per kernel module of one model: LLVM time and code size under several pipelines.

Compiles the model once (object cache off, one compile thread) and keeps every LLVM module's
text, then compiles each of the ``--slowest N`` modules again under each pipeline variant on
this thread, one after the other, and prints per module and variant: the thread CPU seconds
of optimization and of machine code generation, the IR lines before and after the pipeline
and the object's size. Thread CPU time is what the comparison rests on: on a shared machine
wall time measures the neighbours.

    .venv/bin/python bench/llvm_pipelines.py resnet50 --slowest 6 --repeat 3

Variants: ``O3`` (glow-cpu's default), ``O3-nounroll`` (the loop unroller off), ``O3-novec``
(loop and SLP vectorizers and unroller off), ``O2`` and ``O1`` (LLVM's levels with the same
switches as ``O3``). The code generator's level stays at 3 everywhere.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import llvmlite.binding as llvm
import onnx
from glow_cpu import jit
from glow_cpu import llvm_unlocked as unlocked

import glow_core
from glow_core.model_zoo import MODELS

VARIANTS: dict[str, dict[str, Any]] = {
    "O3": {"speed_level": 3},
    "O3-nounroll": {"speed_level": 3, "loop_unrolling": False},
    "O3-novec": {
        "speed_level": 3,
        "loop_unrolling": False,
        "loop_vectorization": False,
        "slp_vectorization": False,
    },
    "O2": {"speed_level": 2},
    "O1": {"speed_level": 1},
}


def capture_modules(model: str) -> list[tuple[str, str]]:
    """Every (name, text) module a cold one-thread compile of ``model`` hands to LLVM."""
    seen: list[tuple[str, str]] = []
    original = jit._compile_module

    def keep(text: str, name: str, *args: Any) -> bytes:
        seen.append((name, text))
        return original(text, name, *args)

    jit._compile_module = keep
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{model}.onnx")
            onnx.save(MODELS[model](), path)
            glow_core.compile(path, backend="cpu", options={"cache": False, "compile_threads": 1})
    finally:
        jit._compile_module = original
    return seen


def measure(text: str, variant: dict[str, Any], target: jit.HostTarget) -> tuple[float, float, int, int]:
    """(optimization s, machine code s, IR lines after, object bytes) in thread CPU time."""
    machine = jit._thread_machine(target, 3)
    module = unlocked.parse(text, llvm.create_context())
    module.triple = target.triple
    module.data_layout = str(machine.target_data)
    options = llvm.create_pipeline_tuning_options(speed_level=variant["speed_level"])
    options.loop_vectorization = variant.get("loop_vectorization", True)
    options.slp_vectorization = variant.get("slp_vectorization", True)
    options.loop_unrolling = variant.get("loop_unrolling", True)
    builder = llvm.create_pass_builder(machine, options)
    start = time.thread_time()
    unlocked.run_pipeline(builder.getModulePassManager(), module, builder)
    optimized = time.thread_time()
    lines = str(module).count("\n")
    codegen_start = time.thread_time()
    obj = unlocked.emit_object(machine, module)
    return optimized - start, time.thread_time() - codegen_start, lines, len(obj)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--slowest", type=int, default=6, help="the N modules with the most O3 time")
    parser.add_argument("--repeat", type=int, default=3, help="take the minimum of R compiles")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--dump", help="write the modules' texts into this directory")
    args = parser.parse_args()
    target = jit.host_target()
    modules = capture_modules(args.model)
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        for i, (name, text) in enumerate(modules):
            with open(os.path.join(args.dump, f"{i:02d}.ll"), "w") as f:
                f.write(f"; {name}\n{text}")
    with jit._code_generation_options():
        baseline = [(sum(measure(text, VARIANTS["O3"], target)[:2]), name, text) for name, text in modules]
        total = sum(seconds for seconds, _, _ in baseline)
        print(
            f"{args.model}: {len(modules)} modules, O3 total {total:.2f} thread CPU s, "
            f"load {os.getloadavg()[0]:.2f}"
        )
        print("module | variant | opt s | codegen s | IR lines in -> out | object bytes")
        for _, name, text in sorted(baseline, key=lambda row: -row[0])[: args.slowest]:
            lines_in = text.count("\n")
            for variant in args.variants:
                runs = [measure(text, VARIANTS[variant], target) for _ in range(args.repeat)]
                opt = min(r[0] for r in runs)
                gen = min(r[1] for r in runs)
                print(
                    f"{name[:60]} | {variant} | {opt:.3f} | {gen:.3f} | "
                    f"{lines_in} -> {runs[0][2]} | {runs[0][3]}"
                )


if __name__ == "__main__":
    main()
