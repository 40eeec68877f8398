"""The float64 convolution oracle of the lowering tests: the float Conv node's
(tests/test_lowering.py) and the integer QuantizedConv's (tests/quant_oracles.py).

It gathers each output pixel's patch with numpy indexing and contracts it per group, sharing
no code with the Convolution primitive's reference or any lowering. (``primitive_cases``
keeps a scalar-loop convolution for the primitive tests: slower, written independently.)"""

from __future__ import annotations

import itertools

import numpy as np


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides, pads, dilations, group) -> np.ndarray:
    """NCHW ``x`` convolved with ``w`` [Cout, Cin/group, kh, kw], plus ``b`` per output channel;
    pads are (top, left, bottom, right). Per output pixel: gather the dilated patch of the
    padded input, contract per group."""
    n, c, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + wd] = x
    oh = (xp.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, cout, oh, ow))
    cout_g = cout // group
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [i * strides[0] + p * dilations[0] for p in range(kh)]
        cols = [j * strides[1] + q * dilations[1] for q in range(kw)]
        patch = xp[:, :, rows][:, :, :, cols]  # [n, c, kh, kw]
        for g in range(group):
            pg = patch[:, g * cin_g : (g + 1) * cin_g].reshape(n, -1)
            wg = w[g * cout_g : (g + 1) * cout_g].reshape(cout_g, -1)
            out[:, g * cout_g : (g + 1) * cout_g, i, j] = pg @ wg.T
    return out + b.reshape(1, -1, 1, 1)
