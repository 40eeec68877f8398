"""Winograd units sized to compute no rows of tiles past the image, before and after, round-robin
beside onnxruntime in one process (``model_ab``; docs/performance.md, "Winograd units without
wasted rows").

A Winograd unit computes all its rows of tiles, so where the rows of a plane do not divide
into units the last one computes rows past the image. For layers with a small filter
(``winograd.SMALL_FILTER``) the plan takes the rows per unit that waste the fewest; "before"
is the plan without that step (``SMALL_FILTER`` 0: the largest units ``UNIT_TILES`` allows).

    .venv/bin/python bench/winograd_units.py [--runs 100] [--cpu-time]
    .venv/bin/python bench/winograd_units.py --model resnet50 [--runs 60] [--cpu-time]

Layers whose plan does not change are the same code in both builds.
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
    (1, 64, 56, 56, 64, 3, 1, 1, 1),  # ResNet-50 layer1.x/conv2: 14 rows of F(4x4) tiles
    (1, 96, 35, 35, 96, 3, 1, 1, 1),  # Inception-v3 Mixed_5x.branch3x3dbl_3: 9 rows
    (1, 128, 112, 112, 128, 3, 1, 1, 1),  # VGG-19 features.2.1: 28 rows
    (1, 256, 56, 56, 256, 3, 1, 1, 1),  # VGG-19 features.3.x: a large filter, unchanged
]


@contextlib.contextmanager
def switched_off():
    """The largest units for every layer, as before, while compiling inside."""
    from glow_cpu.kernels import winograd

    saved = winograd.SMALL_FILTER
    winograd.SMALL_FILTER = 0
    try:
        yield
    finally:
        winograd.SMALL_FILTER = saved


def three_by_three(model) -> set[str]:
    """The names of ``model``'s 3x3 stride-1 convolutions (the Winograd candidates)."""

    def candidate(attributes: dict) -> bool:
        return attributes.get("kernel_shape") == [3, 3] and max(attributes.get("strides", [1])) == 1

    return model_ab.conv_names(model, candidate)


def main() -> None:
    model_ab.layers_or_model_cli(__doc__, LAYERS, switched_off, three_by_three, "3x3 stride-1 convolutions")


if __name__ == "__main__":
    main()
