"""Mean over each window; count_include_pad decides whether pads count in the divisor."""

import numpy as np

from ..kinds import every_kind, widened

KIND = "AvgPool"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, kernel, strides, pads, count_include_pad):
    n, channels, height, width = input.shape
    shape = (height + pads[0] + pads[2], width + pads[1] + pads[3])
    x = widened(input)
    padded = np.zeros((n, channels) + shape, x.dtype)
    padded[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width] = x
    inside = np.zeros(shape, x.dtype)
    inside[pads[0] : pads[0] + height, pads[1] : pads[1] + width] = 1
    oh, ow = dest.shape[2:]
    total = np.zeros(dest.shape, x.dtype)
    count = np.zeros((oh, ow), x.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            rows = slice(i, i + strides[0] * (oh - 1) + 1, strides[0])
            cols = slice(j, j + strides[1] * (ow - 1) + 1, strides[1])
            total += padded[:, :, rows, cols]
            count += inside[rows, cols]
    dest[...] = total / (kernel[0] * kernel[1] if count_include_pad else count)
