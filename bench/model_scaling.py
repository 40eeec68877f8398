"""Two threads against one on a whole zoo model, glow-cpu and onnxruntime (issue 20, item 5).

glow-cpu compiled with ``threads=1`` and ``threads=2`` is timed round-robin in this process
(``round_robin.median_ms``, wall time), then onnxruntime with one and two intra-op threads
the same way: never glow and onnxruntime in one round, because onnxruntime's pool spins
after each run and takes a core from whatever runs next. Prints each engine's medians and
its scaling (1-thread ms / 2-thread ms). Pin it to two idle cores:

    taskset -c 0,1 .venv/bin/python bench/model_scaling.py resnet50 [--runs 20] [--batch 1]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from model_ab import ort_session
from round_robin import median_ms

import glow_core
from glow_core.model_zoo import MODELS, random_inputs


def _ort_run(model, threads: int):
    session = ort_session(model, threads)
    return lambda feeds: session.run(None, feeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    model = MODELS[args.model](batch=args.batch)
    feeds = random_inputs(model, seed=5)
    glow = {
        t: glow_core.compile(model, backend="cpu", options={"threads": t, "cache": False}).run for t in (1, 2)
    }
    glow_ms = median_ms(glow, feeds, args.runs)
    del glow
    ort_ms = median_ms({t: _ort_run(model, t) for t in (1, 2)}, feeds, args.runs)
    print(f"# {args.model} batch {args.batch}, {args.runs} runs")
    for name, ms in (("glow-cpu", glow_ms), ("onnxruntime", ort_ms)):
        print(f"{name}: 1 thread {ms[1]:.2f} ms, 2 threads {ms[2]:.2f} ms, scaling {ms[1] / ms[2]:.2f}x")


if __name__ == "__main__":
    main()
