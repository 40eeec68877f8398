"""One MaxPool layer on glow-cpu: float32 vs int8, and optionally int8 with the int8 pool
kernel of an earlier git revision, timed alternately in one process (one thread).

Figures behind the int8 MaxPool row of docs/quantization.md. The default layer is
ResNet-50's stem pool (1x64x112x112, 3x3, stride 2, pad 1).

    .venv/bin/python bench/int8_pool_speed.py [--runs 15] [--repeat 20] [--baseline REV]

``--baseline REV`` loads ``kernels/int8_pool.py`` as it was at REV (``git show``) and times
int8 with it too ("int8 REV"); the compile cache is off, so each variant is compiled from
its own kernel. Each figure is the median over ``--runs`` samples of the mean of
``--repeat`` calls.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

import glow_core
from glow_core import Builder, Module
from glow_core.types import ElemKind

KERNEL_PATH = "backends/glow_cpu/glow_cpu/kernels/int8_pool.py"


def pool_layer(elem: ElemKind, shape, kernel, stride, pad) -> Module:
    m = Module()
    b = Builder(m.create_function())
    x = b.placeholder("x", shape, elem=elem)
    b.save(b.create("MaxPool", x, kernel=kernel, strides=stride, pads=(pad,) * 4), "out")
    return m


def kernel_at(revision: str) -> Callable:
    """``int8_max_pool`` as ``kernels/int8_pool.py`` defined it at ``revision``."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "show", f"{revision}:{KERNEL_PATH}"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(f"int8_pool_at_{revision}")
    exec(compile(source, f"{revision}:{KERNEL_PATH}", "exec"), module.__dict__)
    return module.int8_max_pool


def compiled(elem: ElemKind, args, kernel: Callable | None):
    """The layer compiled for one thread, with ``kernel`` as the int8 pool emitter if given."""
    import glow_cpu.kernels.int8_pool as pool_module

    current = pool_module.int8_max_pool
    pool_module.int8_max_pool = kernel or current
    try:
        return glow_core.compile(pool_layer(elem, *args), "cpu", options={"threads": 1, "cache": False})
    finally:
        pool_module.int8_max_pool = current


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=(1, 64, 112, 112))
    parser.add_argument("--kernel", type=int, nargs=2, default=(3, 3))
    parser.add_argument("--stride", type=int, nargs=2, default=(2, 2))
    parser.add_argument("--pad", type=int, default=1)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--baseline", help="git revision whose int8 pool kernel is timed too")
    a = parser.parse_args()
    args = (tuple(a.shape), tuple(a.kernel), tuple(a.stride), a.pad)
    rng = np.random.default_rng(0)
    variants = {
        "float32": (compiled(ElemKind.float32, args, None), rng.standard_normal(a.shape).astype(np.float32)),
        "int8": (compiled(ElemKind.int8, args, None), rng.integers(-128, 128, a.shape).astype(np.int8)),
    }
    if a.baseline:
        variants[f"int8 {a.baseline}"] = (
            compiled(ElemKind.int8, args, kernel_at(a.baseline)),
            variants["int8"][1],
        )
        want = variants["int8"][0].run({"x": variants["int8"][1]})["out"]
        got = variants[f"int8 {a.baseline}"][0].run({"x": variants["int8"][1]})["out"]
        assert np.array_equal(want, got), "the two int8 kernels disagree"
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(a.runs):
        for name, (fn, x) in variants.items():  # alternating: load changes hit every variant alike
            fn.run({"x": x})
            start = time.perf_counter()
            for _ in range(a.repeat):
                fn.run({"x": x})
            samples[name].append((time.perf_counter() - start) / a.repeat)
    print(f"MaxPool {a.shape} kernel {a.kernel} stride {a.stride} pad {a.pad}, 1 thread")
    for name, times in samples.items():
        print(f"  {name:>16}: median {statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
