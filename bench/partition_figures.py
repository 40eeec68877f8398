"""Figures behind docs/partitioning.md: accuracy of split models, partitioning time, latency.

    .venv/bin/python bench/partition_figures.py accuracy [MODEL ...]   # max rel err vs onnxruntime
    .venv/bin/python bench/partition_figures.py timing                 # partitioning ResNet-50
    .venv/bin/python bench/partition_figures.py latency [--runs 20]    # cpu 2 partitions vs 1
    .venv/bin/python bench/partition_figures.py vgg [--mib 300]        # VGG-19 over two cpu devices

"acme" is the interpreter restricted to Convolution, MatMul and BatchMatMul (what a vendor
backend that runs only convolutions and products declares), with a high peak FLOP figure so
the cost model keeps those on it. Latency is timed alternately in one process, one thread,
minimum of ``--runs`` (a shared machine: indicative only).
"""

from __future__ import annotations

import argparse
import time

from glow_interpreter.backend import InterpreterBackend

import glow_core
from glow_core import model_zoo
from glow_core.accuracy import max_relative_error, onnxruntime_outputs
from glow_core.backend import BackendInfo

SPLITS = ("opencl,cpu", "acme,cpu")


class Acme(InterpreterBackend):
    name = "acme"

    def info(self) -> BackendInfo:
        base = super().info()
        keep = ("Convolution", "MatMul", "BatchMatMul")
        supports = {k: v for k, v in base.supports.items() if k in keep}
        return base.model_copy(update={"name": "acme", "supports": supports, "peak_flops": 1e13})


def _backends(split: str) -> list:
    return [Acme() if name == "acme" else name for name in split.split(",")]


def accuracy(models: list[str]) -> None:
    print("| model | backends | partitions | max rel err vs onnxruntime | compile s |")
    print("|---|---|---|--:|--:|")
    for name in models:
        model = model_zoo.MODELS[name]()
        inputs = model_zoo.random_inputs(model, 0)
        expected = onnxruntime_outputs(model, inputs)
        for split in SPLITS:
            start = time.perf_counter()
            compiled = glow_core.compile(model, backend=_backends(split))
            seconds = time.perf_counter() - start
            error = max_relative_error(compiled.run(inputs), expected)
            print(f"| {name} | {split} | {compiled.summary().split(';')[0]} | {error:.2e} | {seconds:.1f} |")


def timing() -> None:
    from glow_core.partition import partition_function, resolve_devices
    from glow_core.runtime.partitioned import optimized_module
    from glow_core.runtime.pipeline import load_model

    module = load_model(model_zoo.resnet50())
    for split in ("cpu", "opencl,cpu", "acme,cpu", "cpu,cpu"):
        devices = resolve_devices(
            _backends(split), {"memory_bytes": 60 * 2**20} if split == "cpu,cpu" else None
        )
        best = float("inf")
        for _ in range(5):
            fn = optimized_module(module).function
            start = time.perf_counter()
            plan = partition_function(fn, devices)
            best = min(best, time.perf_counter() - start)
        print(f"ResNet-50 on {split}: partitioned in {best * 1e3:.1f} ms (best of 5): {plan.summary()}")


def latency(runs: int) -> None:
    model = model_zoo.resnet50()
    inputs = model_zoo.random_inputs(model, 0)
    one = glow_core.compile(model, backend="cpu", options={"threads": 1})
    two = glow_core.compile(
        model, backend=["cpu", "cpu"], options={"threads": 1}, partition={"layer[34]*": 1, "*": 0}
    )
    print(two.summary())
    times = {"1 partition": [], "2 partitions": []}
    for _ in range(runs):
        for label, fn in (("1 partition", one), ("2 partitions", two)):
            start = time.perf_counter()
            fn.run(inputs)
            times[label].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    ratio = best["2 partitions"] / best["1 partition"]
    print(", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in best.items()) + f"; ratio {ratio:.3f}")


def vgg(mib: int) -> None:
    model = model_zoo.vgg19()
    inputs = model_zoo.random_inputs(model, 0)
    try:
        compiled = glow_core.compile(model, backend=["cpu", "cpu"], options={"memory_bytes": mib * 2**20})
    except glow_core.GlowError as err:
        print(f"VGG-19 on 2 x cpu of {mib} MiB: refused: {err}")
        return
    print(f"VGG-19 on 2 x cpu of {mib} MiB: {compiled.summary()}")
    for step in compiled.steps:
        plan = step.stages.plan
        held = plan.constant_bytes + plan.placeholder_bytes + plan.arena_bytes
        print(
            f"  {step.label}: memory plan {held / 2**20:.1f} MiB, "
            f"estimate {step.partition.memory_bytes / 2**20:.1f} MiB"
        )
    error = max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs))
    print(f"  max rel err vs onnxruntime {error:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("accuracy", "timing", "latency", "vgg"))
    parser.add_argument("models", nargs="*", default=["resnet50", "mobilenetv2", "bert_mini"])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--mib", type=int, default=300)
    args = parser.parse_args()
    if args.what == "accuracy":
        accuracy(args.models)
    elif args.what == "timing":
        timing()
    elif args.what == "latency":
        latency(args.runs)
    else:
        vgg(args.mib)


if __name__ == "__main__":
    main()
