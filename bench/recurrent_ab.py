"""Recurrent layers on glow-cpu kept whole (``kernels/recurrent.py``) against the same layers
unrolled (as before, and as every other backend runs them) and onnxruntime: cold compile
time and run time, in one process.

    .venv/bin/python bench/recurrent_ab.py                        # gru_text and larger layers
    .venv/bin/python bench/recurrent_ab.py --shapes 40x9x32 --threads 1 2 --runs 60

A shape is ``SEQxLAYERSxHIDDEN`` (optionally ``xBATCH``) of the zoo's ``gru_text`` (stacked
bidirectional GRUs over 64 embedded features). The unrolled column compiles with
``recurrent.kept`` patched to refuse every node: exactly the graph the lowering builds.
Compile times are wall and process CPU seconds of one ``glow_core.compile`` with the object
cache off; run times are medians of ``round_robin.median_ms`` (shuffled rounds; the calling
thread's CPU time with one thread, wall time with more).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
from glow_cpu.kernels import recurrent
from model_ab import ort_session
from round_robin import median_ms

import glow_core
from glow_core.model_zoo import gru_text, random_inputs

DEFAULT_SHAPES = ["40x9x32", "400x1x128", "100x2x256", "50x2x256x8"]


def _compile(model, threads: int, kept: bool):
    """(compiled function, wall s, CPU s) with recurrences kept or unrolled."""
    original = recurrent.kept
    if not kept:
        recurrent.kept = lambda node: False
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        compiled = glow_core.compile(model, backend="cpu", options={"cache": False, "threads": threads})
        return compiled, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        recurrent.kept = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--threads", nargs="+", type=int, default=[1])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--no-unrolled", action="store_true", help="skip the unrolled column (slow)")
    args = parser.parse_args()
    columns = "compile kept s (cpu) | compile unrolled s (cpu) | kept ms | unrolled ms | ort ms"
    print(f"| model | threads | {columns} | kept/unrolled | kept/ort |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for shape in args.shapes:
        seq, layers, hidden, *rest = (int(v) for v in shape.split("x"))
        model = gru_text(seq=seq, layers=layers, hidden=hidden, batch=rest[0] if rest else 1)
        inputs = random_inputs(model, seed=5)
        for threads in args.threads:
            kept, kept_wall, kept_cpu = _compile(model, threads, True)
            engines = {"kept": lambda x, f=kept: f.run(x)}
            unrolled_cell = "-"
            if not args.no_unrolled:
                unrolled, wall, cpu = _compile(model, threads, False)
                engines["unrolled"] = lambda x, f=unrolled: f.run(x)
                unrolled_cell = f"{wall:.2f} ({cpu:.2f})"
                a, b = kept.run(inputs), unrolled.run(inputs)
                same = all(np.array_equal(a[name], b[name]) for name in a)
                print(f"<!-- {shape} threads {threads}: kept and unrolled outputs bit-equal: {same} -->")
            session = ort_session(model, threads)
            engines["ort"] = lambda x, s=session: s.run(None, x)
            clock = time.thread_time if threads == 1 else time.perf_counter
            ms = median_ms(engines, inputs, args.runs, clock=clock)
            unrolled_ms = ms.get("unrolled")
            unrolled_run = "-" if unrolled_ms is None else f"{unrolled_ms:.3f}"
            ratio = "-" if unrolled_ms is None else f"{ms['kept'] / unrolled_ms:.3f}"
            cells = [f"{kept_wall:.2f} ({kept_cpu:.2f})", unrolled_cell, f"{ms['kept']:.3f}", unrolled_run]
            cells += [f"{ms['ort']:.3f}", ratio, f"{ms['kept'] / ms['ort']:.3f}"]
            print(f"| gru_text {shape} | {threads} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
