"""glow-cpu's per-instruction profile and onnxruntime's per-node profile taken in alternating
runs of one process (one glow run, one onnxruntime run, repeated), and the whole runs of both
engines in the same rounds: their ratios at one moment of a machine whose speed drifts.

``profile_pairs.py`` profiles one engine after the other, so on a VM whose speed moves by a
third from one minute to the next its ratios compare two moments; here every round has one
run of each, and every run follows the other engine's, so neither finds its weights in cache
from its own previous run (as inside an application that runs other work between
inferences); ``bench_models.py``'s alone column measures the warm case. (A profile taken by
``median_profile`` would follow its own warm-up run: at batch 8 glow's ResNet-50 kernels summed
691 ms warm against 808 ms for its whole runs after onnxruntime's, 2026-11-27.)

    .venv/bin/python bench/interleaved_profile.py bert_mini [--batch 8] [--rounds 10]
        [--pairs 20]

Prints the totals and ratios, then with ``--pairs N`` the N convolutions glow loses most on
(``profile_pairs.pairs``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from model_ab import ort_session
from profile_pairs import node_medians, pairs


def main() -> None:
    import glow_core
    from glow_core.model_zoo import MODELS, random_inputs

    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=0, help="list this many convolutions, worst first")
    args = parser.parse_args()
    model = MODELS[args.model](batch=args.batch)
    inputs = random_inputs(model, seed=0)
    plain = glow_core.compile(model, backend="cpu", options={"threads": 1})
    profiled = glow_core.compile(model, backend="cpu", options={"threads": 1, "profile": True})
    session = ort_session(model)
    with tempfile.TemporaryDirectory() as folder:
        traced = ort_session(model, 1, os.path.join(folder, "ort"))
        for run in (plain.run, lambda feeds: session.run(None, feeds), lambda feeds: traced.run(None, feeds)):
            run(inputs)  # warm-up (onnxruntime's profile keeps it: skipped below)
        glow_rows: dict[str, list[float]] = collections.defaultdict(list)
        walls: dict[str, list[float]] = {"glow": [], "ort": []}
        for _ in range(args.rounds):
            start = time.perf_counter()
            plain.run(inputs)
            walls["glow"].append(time.perf_counter() - start)
            start = time.perf_counter()
            session.run(None, inputs)
            walls["ort"].append(time.perf_counter() - start)
            profiled.run(inputs)  # one run, after onnxruntime's (median_profile warms up first)
            for row in profiled.last_profile:
                glow_rows[row.name].append(row.seconds * 1e3)
            traced.run(None, inputs)
        with open(traced.end_profiling()) as file:
            nodes = node_medians(json.load(file), args.rounds)
    glow = {name: float(np.median(v)) for name, v in glow_rows.items()}
    glow_ms, ort_ms = sum(glow.values()), sum(nodes.values())
    wall = {engine: float(np.median(v)) * 1e3 for engine, v in walls.items()}
    print(f"{args.model} batch {args.batch}, one thread, {args.rounds} alternating rounds")
    print(f"whole runs: glow {wall['glow']:.2f} ms, onnxruntime {wall['ort']:.2f} ms", end=", ")
    print(f"glow/ort {wall['glow'] / wall['ort']:.3f}")
    print(f"kernels: glow instructions {glow_ms:.2f} ms, onnxruntime nodes {ort_ms:.2f} ms", end=", ")
    print(f"glow/ort {glow_ms / ort_ms:.3f}")
    if args.pairs:
        print("\n| convolution | glow ms | ort ms | glow/ort | glow - ort ms |\n|---|--:|--:|--:|--:|")
        for conv, g, o in pairs(model, glow, nodes)[: args.pairs]:
            print(f"| {conv} | {g:.3f} | {o:.3f} | {g / o:.2f} | {g - o:+.3f} |")


if __name__ == "__main__":
    main()
