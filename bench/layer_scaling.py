"""Two threads against one, per convolution layer: which of ResNet-50's layers hold the
model's scaling back (issue 20, item 5).

Each layer of ``bench_layers.LAYERS`` (Conv + bias + ReLU, batch 1 unless ``--batch``) is
compiled for glow-cpu with ``threads=1`` and ``threads=2``; both are timed round-robin in
this one process (``round_robin.median_ms``, wall time) and the ratio is printed with the
layer's GFLOP/s. Outputs of the two builds are compared (relative error), so a split that
drops work shows. Run it alone on a machine with at least two idle cores, pinned:

    taskset -c 0,1 .venv/bin/python bench/layer_scaling.py [--runs 30] [--layers 3 4 8]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from bench_layers import LAYERS, conv_layer
from round_robin import median_ms

import glow_core
from glow_core.accuracy import relative_error

RESNET50_LAYERS = tuple(range(12))  # bench_layers.LAYERS[:12]: ResNet-50's shapes


def _describe(layer: tuple[int, ...]) -> str:
    n, c, h, w, cout, k, s, _pad, group = layer
    kind = "dw " if group > 1 else ""
    return f"{kind}{c}->{cout} {k}x{k}/s{s} @{h}x{w} n{n}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--layers", type=int, nargs="*", default=list(RESNET50_LAYERS))
    parser.add_argument("--parts-per-thread", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(20)
    print("| layer | 1 thread ms | 2 threads ms | scaling | GFLOP/s (1 thread) | rel. error |")
    print("|---|--:|--:|--:|--:|--:|")
    for index in args.layers:
        layer = (args.batch, *LAYERS[index][1:])
        model, flops = conv_layer(*layer)
        x = {model.graph.input[0].name: rng.standard_normal(layer[:4]).astype(np.float32)}
        engines = {}
        for threads in (1, 2):
            options = {"threads": threads, "cache": False, "parts_per_thread": args.parts_per_thread}
            compiled = glow_core.compile(model, backend="cpu", options=options)
            engines[threads] = compiled.run
        error = relative_error(next(iter(engines[2](x).values())), next(iter(engines[1](x).values())))
        ms = median_ms(engines, x, args.runs)
        gflops = flops / ms[1] / 1e6
        print(
            f"| {index}: {_describe(layer)} | {ms[1]:.3f} | {ms[2]:.3f} | {ms[1] / ms[2]:.2f}x "
            f"| {gflops:.0f} | {error:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
