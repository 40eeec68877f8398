"""Maximum over each window; neither padding nor NaN wins (fmax skips NaN, and floats are
padded with NaN), so a window is NaN only when all its elements are."""

import numpy as np

from ..kinds import every_kind

KIND = "MaxPool"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, kernel, strides, pads):
    n, channels, height, width = input.shape
    floating = input.dtype.kind not in "iu"
    lowest = np.nan if floating else np.iinfo(input.dtype).min
    padded = np.full(
        (n, channels, height + pads[0] + pads[2], width + pads[1] + pads[3]), lowest, input.dtype
    )
    padded[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width] = input
    oh, ow = dest.shape[2:]
    dest.fill(lowest)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            window = padded[
                :,
                :,
                i : i + strides[0] * (oh - 1) + 1 : strides[0],
                j : j + strides[1] * (ow - 1) + 1 : strides[1],
            ]
            (np.fmax if floating else np.maximum)(dest, window, out=dest)
