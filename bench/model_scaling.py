"""Two threads against one on a whole zoo model, glow-cpu and onnxruntime (issue 20, item 5).

glow-cpu compiled with ``threads=1`` and ``threads=2`` is timed in this process, then
onnxruntime with one and two intra-op threads the same way: never glow and onnxruntime in
one round, because onnxruntime's pool spins after each run and takes a core from whatever
runs next. Two ways, both printed: single calls of the two builds in turn
(``round_robin.median_ms``: every call finds the caches full of the other build's data), and
blocks of back-to-back calls of one build, the builds' blocks in turn
(``round_robin.median_ms_in_blocks``: what a model running alone sees). Prints each engine's
medians and its scaling (1-thread ms / 2-thread ms). Pin it to two idle cores:

    taskset -c 0,1 .venv/bin/python bench/model_scaling.py resnet50 [--runs 20] [--batch 1]
        [--blocks 8]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from model_ab import ort_session
from round_robin import median_ms, median_ms_in_blocks

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
    parser.add_argument("--blocks", type=int, default=8, help="rounds of blocks of 10 calls (0: none)")
    args = parser.parse_args()
    model = MODELS[args.model](batch=args.batch)
    feeds = random_inputs(model, seed=5)
    results = {}
    glow = {
        t: glow_core.compile(model, backend="cpu", options={"threads": t, "cache": False}).run for t in (1, 2)
    }
    results["glow-cpu"] = _timed(glow, feeds, args)
    del glow
    results["onnxruntime"] = _timed({t: _ort_run(model, t) for t in (1, 2)}, feeds, args)
    print(f"# {args.model} batch {args.batch}: {args.runs} calls in turn; {args.blocks} rounds of blocks")
    for name, by_mode in results.items():
        for mode, ms in by_mode.items():
            one, two = ms[1], ms[2]
            print(f"{name}, {mode}: 1 thread {one:.2f} ms, 2 threads {two:.2f} ms, scaling {one / two:.2f}x")


def _timed(engines, feeds, args) -> dict[str, dict[int, float]]:
    """Medians per thread count: calls in turn, then blocks (``--blocks`` rounds)."""
    timed = {"calls in turn": median_ms(engines, feeds, args.runs)}
    if args.blocks:
        timed["blocks"] = median_ms_in_blocks(engines, feeds, args.blocks)
    return timed


if __name__ == "__main__":
    main()
