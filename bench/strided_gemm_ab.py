"""Strided 3x3 layers on the phase-split GEMM instead of the blocked direct kernel, on targets
whose registers hold 8 floats (AVX2; ``conv_blocked.STRIDED_GEMM_PIXELS`` and
``STRIDED_GEMM_CHANNELS``), before and after, round-robin beside onnxruntime in one process
(``model_ab``; docs/performance.md, "Strided layers on the GEMM").

    .venv/bin/python bench/strided_gemm_ab.py [--runs 100] [--threads 1] [--cpu-time]
    .venv/bin/python bench/strided_gemm_ab.py --model resnet50 [--runs 40] [--cpu-time]

On an AVX-512 target both builds are the same code.
"""

from __future__ import annotations

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
    (1, 192, 17, 17, 320, 3, 2, 0, 1),  # Inception-v3 Mixed_7a (8x8 out)
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
    return model_ab.conv_names(model, lambda attributes: max(attributes.get("strides", [1])) > 1)


def main() -> None:
    model_ab.layers_or_model_cli(__doc__, LAYERS, switched_off, strided, "strided convolutions")


if __name__ == "__main__":
    main()
