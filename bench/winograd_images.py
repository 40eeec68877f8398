"""Winograd units of several whole images on small planes (``winograd.Plan.images``), before
and after, round-robin beside onnxruntime in one process (``model_ab``; docs/performance.md,
"Winograd units of several images").

A unit reads the whole transformed filter, so a layer whose image has few tiles (ResNet-50's
14x14 and 7x7 layers: 16 tiles of F(4x4) or F(2x2)) read its filter once per image at batch
8. On several threads a batch that fits one unit is one unit whose output channels the
threads split (``BATCH_SPLIT_BY_CHANNELS``), and F(4x4) also takes planes under 14x14 where a
unit gathers ``F4_MIN_UNIT_TILES`` tiles. "Before" is one image a unit (``_images_per_unit``
returning 1, no batch split, hence no F(4x4) on small planes); at batch 1 nothing changes.

    .venv/bin/python bench/winograd_images.py --batch 8 [--runs 20] [--cpu-time]
    .venv/bin/python bench/winograd_images.py --model resnet50 --batch 8 [--runs 12] [--cpu-time]
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "backends", "glow_cpu", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import model_ab
from winograd_units import three_by_three

# (n, c, h, w, cout, k, stride, pad, group); the batch comes from --batch
LAYERS = [
    (8, 512, 7, 7, 512, 3, 1, 1, 1),  # ResNet-50 layer4.x/conv2: F(2x2) before, F(4x4) after
    (8, 256, 14, 14, 256, 3, 1, 1, 1),  # ResNet-50 layer3.x/conv2: F(4x4), 16 tiles
    (8, 192, 17, 17, 192, 3, 1, 1, 1),  # an Inception-v3 17x17 shape: F(4x4), 25 tiles
    (8, 128, 28, 28, 128, 3, 1, 1, 1),  # ResNet-50 layer2.x/conv2: 49 tiles, unchanged
]


@contextlib.contextmanager
def switched_off():
    """One image a unit, as before, while compiling inside."""
    from glow_cpu.kernels import winograd

    saved = winograd._images_per_unit, winograd.BATCH_SPLIT_BY_CHANNELS
    winograd._images_per_unit = lambda batch, image_tiles, parts: 1
    winograd.BATCH_SPLIT_BY_CHANNELS = False
    try:
        yield
    finally:
        winograd._images_per_unit, winograd.BATCH_SPLIT_BY_CHANNELS = saved


def main() -> None:
    model_ab.layers_or_model_cli(__doc__, LAYERS, switched_off, three_by_three, "3x3 stride-1 convolutions")


if __name__ == "__main__":
    main()
