"""Winograd F(2x2,3x3) and F(4x4,3x3) against glow-cpu's direct convolution, per layer: the
ResNet-50 and VGG-19 3x3 stride-1 shapes (Conv + bias + ReLU, batch 1), one thread.

Each variant is forced on every layer (the selection rule and its accuracy check are
bypassed, so this measures what the rule in ``glow_cpu/kernels/winograd.py`` is chosen
from); outputs are checked against the direct kernel's. The variants of a layer are timed
round-robin in this one process (one run of each in turn, ``--rounds`` times), and the
median of each is reported: a shared machine's load shifts all of them alike.

    .venv/bin/python bench/winograd_layers.py [--rounds 15] [--threads 1] [--batch 1]
        [--layers 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

LAYERS = (3, 4, 5, 6, 12, 13, 14, 15, 16, 17)  # indices into bench_layers.LAYERS: 3x3 stride 1


def _compile(model, threads: int, variant: int | None):
    """The layer compiled with Winograd off (None) or forced to F(variant x variant)."""
    import glow_cpu.kernels.winograd as winograd

    import glow_core

    saved = winograd.preferred, winograd.accurate_enough
    if variant is not None:
        winograd.preferred = lambda g, parts=1, accumulators=24: (variant,)
        winograd.accurate_enough = lambda m, cin: True
    try:
        options = {"threads": threads, "cache": False, "winograd": variant is not None}
        return glow_core.compile(model, backend="cpu", options=options)
    finally:
        winograd.preferred, winograd.accurate_enough = saved


def main() -> None:
    import bench_layers

    from glow_core.model_zoo import random_inputs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", type=int, nargs="*", default=list(LAYERS))
    parser.add_argument("--batch", type=int, default=1, help="images per run (the table's n)")
    args = parser.parse_args()
    variants = {"direct": None, "F(2x2)": 2, "F(4x4)": 4}
    print(
        "| layer (n, c, h, w, cout) | direct ms | F(2x2) ms | F(4x4) ms | F(2x2) speed-up | F(4x4) speed-up |"
    )
    print("|---|--:|--:|--:|--:|--:|")
    for index in args.layers:
        layer = (args.batch, *bench_layers.LAYERS[index][1:])
        model, _ = bench_layers.conv_layer(*layer)
        feeds = random_inputs(model, seed=0)
        compiled = {name: _compile(model, args.threads, m) for name, m in variants.items()}
        want = next(iter(compiled["direct"].run(feeds).values()))
        for name, fn in compiled.items():
            got = next(iter(fn.run(feeds).values()))
            error = np.max(np.abs(got - want)) / np.max(np.abs(want))
            assert error <= 1e-4, f"{layer} {name}: relative error {error:.3g} against direct"
        times: dict[str, list[float]] = {name: [] for name in compiled}
        for _ in range(args.rounds):
            for name, fn in compiled.items():
                start = time.perf_counter()
                fn.run(feeds)
                times[name].append(time.perf_counter() - start)
        ms = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
        print(
            f"| {layer[:5]} | {ms['direct']:.2f} | {ms['F(2x2)']:.2f} | {ms['F(4x4)']:.2f} | "
            f"{ms['direct'] / ms['F(2x2)']:.2f}x | {ms['direct'] / ms['F(4x4)']:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
