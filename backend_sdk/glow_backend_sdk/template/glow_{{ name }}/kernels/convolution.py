"""Direct 2-D convolution, NCHW: one accumulation per kernel tap and group.

The loop structure (taps outside, a small GEMM inside) is the usual starting point for a
device kernel; replace it with yours."""

import numpy as np

from ..kinds import every_kind, widened

KIND = "Convolution"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, filter, *, strides, pads, dilations, group):
    n, channels, height, width = input.shape
    out_channels, group_channels, kh, kw = filter.shape
    x = widened(input)
    padded = np.zeros((n, channels, height + pads[0] + pads[2], width + pads[1] + pads[3]), x.dtype)
    padded[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width] = x
    oh, ow = dest.shape[2:]
    per_group = out_channels // group
    total = np.zeros(dest.shape, x.dtype)
    for g in range(group):
        group_input = padded[:, g * group_channels : (g + 1) * group_channels]
        out = total[:, g * per_group : (g + 1) * per_group]
        for i in range(kh):
            for j in range(kw):
                top, left = i * dilations[0], j * dilations[1]
                window = group_input[
                    :,
                    :,
                    top : top + strides[0] * (oh - 1) + 1 : strides[0],
                    left : left + strides[1] * (ow - 1) + 1 : strides[1],
                ]
                taps = widened(filter[g * per_group : (g + 1) * per_group, :, i, j])
                out += np.einsum("nchw,oc->nohw", window, taps)
    dest[...] = total
