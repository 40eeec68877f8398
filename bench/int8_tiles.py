"""int8 convolution layers with micro-tiles of several heights (``int8_shape.MR``: output
channels per tile, 2 x MR accumulators of 8 int32 lanes), beside the float32 layer of the
same shape: whether the int8 tile fits this CPU's vector register file.

Every variant is compiled with the object cache off (the cache does not key on ``MR``) and
timed round-robin in this one process (one run of each in turn, median of ``RUNS``), so a
load change on a shared machine hits them alike. Outputs of all variants are checked equal.

    .venv/bin/python bench/int8_tiles.py [MR ...]      # default: 2 3 4 6 8
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

LAYERS = ((128, 28, 128, 3), (256, 14, 256, 3), (64, 56, 64, 3), (1024, 14, 256, 1))
"""(channels, height = width, output channels, kernel): ResNet-50's 3x3 and 1x1 shapes."""
RUNS = 15


def _layer(rng: np.random.Generator, c: int, h: int, cout: int, k: int, quantized: bool):
    from glow_core import Builder, Module
    from glow_core.types import ElemKind

    m = Module()
    b = Builder(m.create_function())
    pads = (k // 2,) * 4
    if not quantized:
        x = b.placeholder("x", (1, c, h, h))
        w = b.constant(rng.standard_normal((cout, c, k, k)).astype(np.float32) * 0.05, "w")
        b.save(b.conv(x, w, b.constant(np.zeros(cout, np.float32), "bias"), pads=pads), "out")
        return m, {"x": rng.standard_normal((1, c, h, h)).astype(np.float32)}
    x = b.placeholder("x", (1, c, h, h), elem=ElemKind.int8)
    w = m.create_constant("w", rng.integers(-127, 128, (cout, c, k, k)).astype(np.int8))
    bias = m.create_constant("bias", rng.integers(-5000, 5000, cout).astype(np.int32))
    mult = m.create_constant("mult", rng.uniform(0.5, 2.0, cout) * 40 / (np.sqrt(c * k * k) * 75 * 75))
    b.save(b.create("QuantizedConv", x, w, bias, mult, pads=pads, input_offset=-3), "out")
    return m, {"x": rng.integers(-128, 128, (1, c, h, h)).astype(np.int8)}


def main(heights: list[int]) -> None:
    from glow_cpu.kernels import int8_conv, int8_shape

    import glow_core

    def use_tile_height(mr: int) -> None:
        # The plan (int8_shape) and the emitter (int8_conv, which imports it by name) both read MR.
        int8_shape.MR = int8_conv.MR = mr

    rng = np.random.default_rng(0)
    options = {"threads": 1, "cache": False}
    columns = [f"int8 MR={mr} ms" for mr in heights] + ["float32 ms"]
    print("| layer (c, h, cout, k) | " + " | ".join(columns) + " |")
    print("|---|" + "--:|" * len(columns))
    original = int8_shape.MR
    for shape in LAYERS:
        model, inputs = _layer(rng, *shape, quantized=True)
        engines, first = [], None
        try:
            for mr in heights:
                use_tile_height(mr)
                fn = glow_core.compile(model, "cpu", options=options)
                out = fn.run(inputs)["out"]
                first = out if first is None else first
                assert np.array_equal(out, first), f"MR={mr} changes the result"
                engines.append((fn, inputs))
        finally:
            use_tile_height(original)
        model, float_inputs = _layer(rng, *shape, quantized=False)
        engines.append((glow_core.compile(model, "cpu", options=options), float_inputs))
        times: list[list[float]] = [[] for _ in engines]
        for fn, feed in engines:
            fn.run(feed)  # warm-up
        for _ in range(RUNS):
            for spent, (fn, feed) in zip(times, engines, strict=True):
                start = time.perf_counter()
                fn.run(feed)
                spent.append(time.perf_counter() - start)
        cells = " | ".join(f"{statistics.median(t) * 1e3:.2f}" for t in times)
        print(f"| {shape} | {cells} |", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2, 3, 4, 6, 8])
