"""MobileNetV2's GEMM convolutions on the AVX2 tile's edges: the 1x1 projections and
expansions whose planes leave a partial column vector (14x14: 196 = 12 x 16 + 4; 7x7: 49 =
3 x 16 + 1) or whose channels leave a short row panel (16, 24, 32, 64, 96 = 5 x q + r), and
the first convolution (3 -> 32, 3x3 stride 2: a 2-row panel). The 2026-11-26 edge changes
off ("before") and on ("after"), beside onnxruntime, round-robin in one process
(docs/performance.md, "MobileNetV2 on AVX2 ... the tile's edges").

    .venv/bin/python bench/projection_layers.py [--batch 1] [--runs 300]
    .venv/bin/python bench/projection_layers.py --model [--batch 1] [--runs 60]

With ``--cpu-time`` every latency is the calling thread's CPU time (one thread: glow-cpu and
onnxruntime run on it), which leaves out the time a loaded machine kept the thread waiting.

The changes, read while the code is generated: column tails in 8 lanes where A's rows fit
(``gemm_tile.tail_width``) and edge tiles' accumulator sets within the tile's register budget
(``gemm_shape.live_accumulators``). The disk cache is off (the builds differ in code, not in
what the cache keys on).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "backends", "glow_cpu", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import model_ab

# (channels, input size, out channels, kernel, stride, pad, epilogue) of MobileNetV2 layers
LAYERS = [
    (3, 224, 32, 3, 2, 1, "bias_clip"),  # features.0: 6 x 5 + 2 rows
    (32, 112, 16, 1, 1, 0, "bias"),  # features.1/conv3: 3 x 5 + 1 rows
    (144, 56, 24, 1, 1, 0, "bias_residual_relu"),  # features.3/conv3: 4 x 5 + 4 rows
    (192, 28, 32, 1, 1, 0, "bias"),  # features.7/conv3 shape: 6 x 5 + 2 rows
    (64, 14, 384, 1, 1, 0, "bias_clip"),  # features.8/conv1: a 4-column tail
    (384, 14, 64, 1, 1, 0, "bias"),  # features.8/conv3: a 4-column tail, 12 x 5 + 4 rows
    (576, 14, 96, 1, 1, 0, "bias"),  # features.13/conv3: a 4-column tail, 19 x 5 + 1 rows
    (960, 7, 320, 1, 1, 0, "bias"),  # features.17/conv3: a 1-column tail
]


@contextlib.contextmanager
def switched_off():
    """The GEMM edge tiles as they were before, while compiling inside."""
    from glow_cpu.emit import VECTOR
    from glow_cpu.kernels import gemm_tile

    saved = gemm_tile.tail_width, gemm_tile.live_accumulators
    gemm_tile.tail_width = lambda mr: VECTOR
    gemm_tile.live_accumulators = lambda accumulators: accumulators
    try:
        yield
    finally:
        gemm_tile.tail_width, gemm_tile.live_accumulators = saved


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--model", action="store_true", help="the whole model and its GEMM convolutions")
    parser.add_argument("--cpu-time", action="store_true", help="time the calling thread's CPU time")
    args = parser.parse_args()
    if args.model:
        model_ab.whole_model(
            args.batch,
            args.runs,
            switched_off,
            lambda model: model_ab.grouped_convs(model, False),
            "GEMM convolutions (all but the depthwise ones)",
            cpu_time=args.cpu_time,
        )
        return
    shapes = [
        ((args.batch, c, size, size, cout, kernel, stride, pad, 1), epilogue)
        for c, size, cout, kernel, stride, pad, epilogue in LAYERS
    ]
    model_ab.single_layers(shapes, switched_off, args.runs, args.cpu_time)


if __name__ == "__main__":
    main()
