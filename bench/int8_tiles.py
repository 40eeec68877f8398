"""int8 convolution layers with micro-tiles of several sizes, beside the float32 layer of the
same shape: whether the int8 tile fits this CPU's vector register file.

- The pairs (default): tile heights ``int8_shape.MR`` (output channels per tile, 2 x MR
  accumulators of 8 int32 lanes).
- ``--quads``: the byte-quad layout (``int8_dot=quads``) with tiles ``CxV``: ``C`` output
  channels (``int8_shape.QUAD_MR``) by ``V`` accumulators of 16 int32 lanes per channel
  (``int8_shape.QUAD_VECTORS``, 1 or 2: tiles of 16 or 32 output positions). ``dot4`` is
  ``vpdpbusd`` on a VNNI CPU and plain IR elsewhere, so the sweep runs anywhere but means
  something only on a VNNI CPU.

Every variant is compiled with the object cache off (the cache does not key on the tile
constants) and timed round-robin in this one process (one run of each in turn, median of
``RUNS``), so a load change on a shared machine hits them alike. Outputs of all variants
are checked equal.

    .venv/bin/python bench/int8_tiles.py [MR ...]              # default: 2 3 4 6 8
    .venv/bin/python bench/int8_tiles.py --quads [CxV ...]     # default: 4x1 8x1 12x1 4x2 8x2 12x2
    (--runs N: timed runs per variant, default 15)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

LAYERS = ((128, 28, 128, 3), (256, 14, 256, 3), (64, 56, 64, 3), (1024, 14, 256, 1))
"""(channels, height = width, output channels, kernel): ResNet-50's 3x3 and 1x1 shapes."""
RUNS = 15
QUAD_TILES = ("4x1", "8x1", "12x1", "4x2", "8x2", "12x2")


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


def _pair_tile(mr: int) -> None:
    from glow_cpu.kernels import int8_conv, int8_shape

    # The plan (int8_shape) and the emitter (int8_conv, which imports it by name) both read MR.
    int8_shape.MR = int8_conv.MR = mr


def _quad_tile(tile: str | None) -> None:
    """Set ``CxV`` (or the defaults for None)."""
    from glow_cpu.kernels import int8_shape

    channels, vectors = (None, 1) if tile is None else map(int, tile.split("x"))
    int8_shape.QUAD_MR, int8_shape.QUAD_VECTORS = channels, vectors


def main(
    variants: list, use: Callable, restore: Callable, label: str, cpu_options: dict, runs: int = RUNS
) -> None:
    import glow_core

    rng = np.random.default_rng(0)
    options = {"threads": 1, "cache": False}
    columns = [f"int8 {label}={v} ms" for v in variants] + ["float32 ms"]
    print("| layer (c, h, cout, k) | " + " | ".join(columns) + " |")
    print("|---|" + "--:|" * len(columns))
    for shape in LAYERS:
        model, inputs = _layer(rng, *shape, quantized=True)
        engines, first = [], None
        try:
            for variant in variants:
                use(variant)
                fn = glow_core.compile(model, "cpu", options={**options, **cpu_options})
                out = fn.run(inputs)["out"]
                first = out if first is None else first
                assert np.array_equal(out, first), f"{label}={variant} changes the result"
                engines.append((fn, inputs))
        finally:
            restore()
        model, float_inputs = _layer(rng, *shape, quantized=False)
        engines.append((glow_core.compile(model, "cpu", options=options), float_inputs))
        times: list[list[float]] = [[] for _ in engines]
        for fn, feed in engines:
            fn.run(feed)  # warm-up
        for _ in range(runs):
            for spent, (fn, feed) in zip(times, engines, strict=True):
                start = time.perf_counter()
                fn.run(feed)
                spent.append(time.perf_counter() - start)
        cells = " | ".join(f"{statistics.median(t) * 1e3:.2f}" for t in times)
        print(f"| {shape} | {cells} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tiles", nargs="*", help="pair tile heights MR, or with --quads tiles CxV")
    parser.add_argument("--quads", action="store_true", help="sweep the byte-quad tiles (int8_dot=quads)")
    parser.add_argument("--runs", type=int, default=RUNS, help="timed runs of each variant (median)")
    args = parser.parse_args()
    if args.quads:
        tiles = args.tiles or list(QUAD_TILES)
        for tile in tiles:
            c, _, v = tile.partition("x")
            if not (c.isdigit() and v in ("1", "2") and int(c) > 0):
                parser.error(f"quad tile {tile!r}: write CxV, C output channels (> 0) and V 1 or 2")
        main(tiles, _quad_tile, lambda: _quad_tile(None), "quads", {"int8_dot": "quads"}, args.runs)
    else:
        from glow_cpu.kernels import int8_shape

        original = int8_shape.MR
        heights = [int(a) for a in args.tiles] or [2, 3, 4, 6, 8]
        main(heights, _pair_tile, lambda: _pair_tile(original), "MR", {}, args.runs)
