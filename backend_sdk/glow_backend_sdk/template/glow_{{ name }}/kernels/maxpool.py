"""Maximum over each window; padding never wins."""

import numpy as np

KIND = "MaxPool"
ELEMENT_KINDS = ("float32",)


def run(dest, input, *, kernel, strides, pads):
    n, channels, height, width = input.shape
    padded = np.full(
        (n, channels, height + pads[0] + pads[2], width + pads[1] + pads[3]), -np.inf, input.dtype
    )
    padded[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width] = input
    oh, ow = dest.shape[2:]
    dest.fill(-np.inf)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            window = padded[
                :,
                :,
                i : i + strides[0] * (oh - 1) + 1 : strides[0],
                j : j + strides[1] * (ow - 1) + 1 : strides[1],
            ]
            np.maximum(dest, window, out=dest)
