"""Run time with and without the loop hints of the dense convolution kernels, one process.

glow-cpu's dense convolution kernels (Winograd, blocked direct, GEMM) build their loops under
``loops.explicit_vector_loops``, which tells LLVM's unroller and loop vectorizer to leave
them alone (compile time). This compiles a model three ways in one process, object cache
off, and times them round-robin, so a shared machine's load falls on all of them alike:

- ``before``: no hints (every loop LLVM's to unroll and vectorize, as before the change);
- ``after``: the hints as glow-cpu emits them;
- ``k-unrolled``: the hints everywhere except the GEMM's reduction loop (``carried_loop``).

It prints the median milliseconds and the ratios to ``before``, and checks the outputs agree.
With ``--profile`` the programs time every instruction (the ``profile`` option, same in all
three) and the figure is the sum over instructions of each one's fastest run: load on a
shared machine only ever adds time, so the minimum is the steadier estimate.

    .venv/bin/python bench/loop_hints_ab.py mobilenetv2 --runs 150 [--threads 1] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from glow_cpu import loops
from glow_cpu.kernels import conv

import glow_core
from glow_core.model_zoo import MODELS, random_inputs

_HINTS = conv.explicit_vector_loops
_MARK = loops._mark_loop


def _mark_all_but_reduction(back_edge: Any, name: str, vectorize: bool) -> None:
    if name != "k":  # carried_loop's name: the GEMM micro-kernel's reduction over k
        _MARK(back_edge, name, vectorize)


VARIANTS: dict[str, tuple[Callable[[], Any], Callable[..., None]]] = {
    "before": (contextlib.nullcontext, _MARK),
    "after": (_HINTS, _MARK),
    "k-unrolled": (_HINTS, _mark_all_but_reduction),
}


def compile_variants(model: onnx.ModelProto, threads: int, profile: bool = False) -> dict[str, Any]:
    """The model compiled once per variant (the hints patched in for the compile only)."""
    compiled = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
        for name, (hints, mark) in VARIANTS.items():
            conv.explicit_vector_loops, loops._mark_loop = hints, mark
            try:
                options = {"cache": False, "threads": threads, "profile": profile}
                compiled[name] = glow_core.compile(path, backend="cpu", options=options)
            finally:
                conv.explicit_vector_loops, loops._mark_loop = _HINTS, _MARK
    return compiled


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="sum of per-instruction minima")
    args = parser.parse_args()
    model = MODELS[args.model]()
    feeds = random_inputs(model, seed=0)
    compiled = compile_variants(model, args.threads, args.profile)
    outputs = {name: fn.run(feeds) for name, fn in compiled.items()}
    for name, out in outputs.items():
        for key, value in out.items():
            np.testing.assert_allclose(value, outputs["before"][key], rtol=1e-5, atol=1e-5, err_msg=name)
    times: dict[str, list[float]] = {name: [] for name in compiled}
    fastest: dict[str, dict[str, float]] = {name: {} for name in compiled}
    for _ in range(args.runs):
        for name, fn in compiled.items():
            start = time.perf_counter()
            fn.run(feeds)
            times[name].append(time.perf_counter() - start)
            for row in fn.last_profile if args.profile else ():
                fastest[name][row.name] = min(fastest[name].get(row.name, row.seconds), row.seconds)
    if args.profile:
        medians = {name: sum(rows.values()) * 1e3 for name, rows in fastest.items()}
    else:
        medians = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
    load = os.getloadavg()[0]
    figure = "sum of per-instruction minima" if args.profile else "median"
    print(f"{args.model}, {args.threads} thread(s), {args.runs} rounds, {figure}, load {load:.1f}")
    for name, ms in medians.items():
        print(f"  {name:11s} {ms:8.2f} ms  {ms / medians['before']:.3f}x before")


if __name__ == "__main__":
    main()
