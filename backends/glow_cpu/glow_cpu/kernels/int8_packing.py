"""The int8 layers' filters packed at compile time (``int8_panels``, ``int8_fc_panels``): int16
pairs along K in panels of output channels, then each channel's weight sum; the layout
``int8_conv.py``'s micro-kernel reads (its docstring describes it).
"""

from __future__ import annotations

import numpy as np

from glow_cpu.packing import exact_packer


def _int8_panels_bytes(channels: int, depth: int, group: int, mr: int) -> int:
    """Bytes of ``int8_panels`` for ``channels`` filters of ``depth`` values in ``group`` groups:
    the int16 pairs of every panel, then one int32 weight sum per (padded) channel."""
    panels, pairs = -(-(channels // group) // mr), -(-depth // 2)
    return group * panels * mr * (pairs * 2 * 2 + 4)


@exact_packer(size=lambda shape, group, mr: _int8_panels_bytes(shape[0], int(np.prod(shape[1:])), group, mr))
def int8_panels(filter: np.ndarray, group: int, mr: int) -> np.ndarray:
    """int8 [Cout, Cin/g, kh, kw] -> bytes: per group and panel of ``mr`` channels,
    int16 [pairs, mr, 2] (zero-padded in K and in channels), then int32 weight sums
    [group * panels * mr] (what the zero point of the input costs each channel)."""
    cout = filter.shape[0]
    rows = filter.reshape(group, cout // group, -1).astype(np.int16)
    depth = rows.shape[2]
    pairs, panels = -(-depth // 2), -(-(cout // group) // mr)
    padded = np.zeros((group, panels * mr, pairs * 2), np.int16)
    padded[:, : cout // group, :depth] = rows
    layout = padded.reshape(group, panels, mr, pairs, 2).transpose(0, 1, 3, 2, 4)
    sums = padded.sum(axis=2, dtype=np.int32).reshape(-1)
    return np.concatenate([np.ascontiguousarray(layout).view(np.uint8).reshape(-1), sums.view(np.uint8)])


def _fc_filter(weights: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(weights.T)[:, :, None, None]


@exact_packer(size=lambda shape, mr: _int8_panels_bytes(shape[1], shape[0], 1, mr))
def int8_fc_panels(weights: np.ndarray, mr: int) -> np.ndarray:
    """int8 [k, m] -> ``int8_panels`` of the [m, k, 1, 1] filter."""
    return int8_panels(_fc_filter(weights), 1, mr)
