"""A convolution's input blocked, and its output turned back into rows of pixels, by 8 x 8
transposes on targets whose registers hold 8 floats (AVX2), against the 16 x 16 transposes
of 16-lane vectors they replaced (docs/performance.md, "Transposes by eights"). The blocked
direct convolutions (on AVX2 the strided ones with small planes or few channels) and the
Winograd ones do both.

    .venv/bin/python bench/transpose_ab.py [--runs 100] [--cpu-time]        # single layers
    .venv/bin/python bench/transpose_ab.py --model resnet50 [--runs 40]     # the whole model

"before" compiles with the 16 x 16 transpose, "after" with the default; both are timed
round-robin beside onnxruntime in one process (``model_ab``). On an AVX-512 target both
builds are the same code.
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "backends", "glow_cpu", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import model_ab

# (n, c, h, w, cout, k, stride, pad, group): 3x3 layers of ResNet-50 and Inception-v3
LAYERS = [
    (1, 512, 14, 14, 512, 3, 2, 1, 1),  # ResNet-50 layer4.0/conv2: blocked direct
    (1, 96, 35, 35, 96, 3, 2, 0, 1),  # Inception-v3 Mixed_6a: blocked direct
    (1, 192, 17, 17, 320, 3, 2, 0, 1),  # Inception-v3 Mixed_7a: blocked direct
    (1, 64, 56, 56, 64, 3, 1, 1, 1),  # ResNet-50 layer1.x/conv2: Winograd
    (1, 128, 28, 28, 128, 3, 1, 1, 1),  # layer2.x/conv2
    (1, 256, 14, 14, 256, 3, 1, 1, 1),  # layer3.x/conv2
]


@contextlib.contextmanager
def switched_off():
    """The 16 x 16 transposes, as before, while compiling inside."""
    from glow_cpu.kernels import conv_blocked, winograd

    saved = conv_blocked.by_eights
    conv_blocked.by_eights = winograd.by_eights = lambda accumulators: False
    try:
        yield
    finally:
        conv_blocked.by_eights = winograd.by_eights = saved


def three_by_three(model) -> set[str]:
    """The names of ``model``'s 3x3 convolutions."""
    return model_ab.conv_names(model, lambda attributes: attributes.get("kernel_shape") == [3, 3])


def main() -> None:
    model_ab.layers_or_model_cli(__doc__, LAYERS, switched_off, three_by_three, "3x3 convolutions")


if __name__ == "__main__":
    main()
