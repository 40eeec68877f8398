"""Strided 3x3 layers on the phase-split GEMM instead of the blocked direct kernel, on targets
whose registers hold 8 floats (AVX2; ``conv_blocked.STRIDED_GEMM_PIXELS`` and
``STRIDED_GEMM_CHANNELS``), before and after, round-robin beside onnxruntime in one process
(``model_ab``; docs/performance.md, "Strided layers on the GEMM").

    .venv/bin/python bench/strided_gemm_ab.py [--runs 100] [--threads 1] [--cpu-time]
    .venv/bin/python bench/strided_gemm_ab.py --model resnet50 [--runs 40] [--cpu-time]

On an AVX-512 target both builds are the same code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "backends", "glow_cpu", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import model_ab

# (n, c, h, w, cout, k, stride, pad, group)
LAYERS = [
    (1, 128, 56, 56, 128, 3, 2, 1, 1),  # ResNet-50 layer2.0/conv2
    (1, 256, 28, 28, 256, 3, 2, 1, 1),  # layer3.0/conv2
    (1, 512, 14, 14, 512, 3, 2, 1, 1),  # layer4.0/conv2
    (1, 288, 35, 35, 384, 3, 2, 0, 1),  # Inception-v3 Mixed_6a
    (1, 96, 35, 35, 96, 3, 2, 0, 1),  # Inception-v3 Mixed_6a's second branch
]


@contextlib.contextmanager
def switched_off():
    """Every strided layer the blocked kernel can take on it, as before, while compiling inside."""
    from glow_cpu.kernels import conv_blocked

    saved = conv_blocked.STRIDED_GEMM_PIXELS
    conv_blocked.STRIDED_GEMM_PIXELS = 1 << 62
    try:
        yield
    finally:
        conv_blocked.STRIDED_GEMM_PIXELS = saved


def strided(model) -> set[str]:
    """The names of ``model``'s strided convolutions."""
    return {
        node.name
        for node in model.graph.node
        if node.op_type == "Conv" and any(a.name == "strides" and max(a.ints) > 1 for a in node.attribute)
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--model", help="a zoo model, whole, and its strided convolutions' profile rows")
    parser.add_argument("--cpu-time", action="store_true", help="time the calling thread's CPU time")
    args = parser.parse_args()
    if args.model:
        model_ab.whole_model(
            args.batch, args.runs, switched_off, strided, "strided convolutions", args.model, args.cpu_time
        )
        return
    shapes = [((args.batch, *layer[1:]), "bias_relu") for layer in LAYERS]
    model_ab.single_layers(shapes, switched_off, args.runs, args.cpu_time)


if __name__ == "__main__":
    main()
