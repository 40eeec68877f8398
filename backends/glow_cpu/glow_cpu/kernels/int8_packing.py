"""The int8 layers' filters packed at compile time: panels of output channels whose
weights are grouped along K in int16 *pairs* (``int8_panels``), in int8 pairs (the dense
kernel's ``int8_fc_byte_pairs``, widened as they are loaded: half the bytes of a weight
matrix read once per image) or in int8 *quads* (``int8_quad_panels``,
``int8_fc_quad_panels``), then each channel's weight sum; the layouts ``int8_conv.py``'s
micro-kernels and ``int8_dense.py`` read (their docstrings describe them).
"""

from __future__ import annotations

import numpy as np

from glow_cpu.kernels.int8_shape import PAIR, QUAD
from glow_cpu.packing import exact_packer


def _panels_bytes(channels: int, depth: int, group: int, mr: int, width: int, itemsize: int) -> int:
    """Bytes of the panels of ``channels`` filters of ``depth`` values in ``group`` groups,
    K in runs of ``width`` values of ``itemsize`` bytes, then one int32 weight sum per
    (padded) channel."""
    panels, steps = -(-(channels // group) // mr), -(-depth // width)
    return group * panels * mr * (steps * width * itemsize + 4)


def _filter_bytes(shape: tuple[int, ...], group: int, mr: int, width: int, itemsize: int) -> int:
    return _panels_bytes(shape[0], int(np.prod(shape[1:])), group, mr, width, itemsize)


def _panels(filter: np.ndarray, group: int, mr: int, width: int, dtype: type) -> np.ndarray:
    """Per group and panel of ``mr`` channels, ``dtype`` [steps, mr, width] (zero-padded in K
    and in channels), then the int32 weight sums [group * panels * mr] (what the zero point
    of the input costs each channel)."""
    cout = filter.shape[0]
    rows = filter.reshape(group, cout // group, -1).astype(dtype)
    depth = rows.shape[2]
    steps, panels = -(-depth // width), -(-(cout // group) // mr)
    padded = np.zeros((group, panels * mr, steps * width), dtype)
    padded[:, : cout // group, :depth] = rows
    layout = padded.reshape(group, panels, mr, steps, width).transpose(0, 1, 3, 2, 4)
    sums = padded.sum(axis=2, dtype=np.int32).reshape(-1)
    return np.concatenate([np.ascontiguousarray(layout).view(np.uint8).reshape(-1), sums.view(np.uint8)])


@exact_packer(size=lambda shape, group, mr: _filter_bytes(shape, group, mr, PAIR, 2))
def int8_panels(filter: np.ndarray, group: int, mr: int) -> np.ndarray:
    """int8 or uint8 [Cout, Cin/g, kh, kw] -> bytes: per group and panel of ``mr`` channels,
    int16 [pairs, mr, 2], then the int32 weight sums."""
    return _panels(filter, group, mr, PAIR, np.int16)


@exact_packer(size=lambda shape, group, mr: _filter_bytes(shape, group, mr, QUAD, 1))
def int8_quad_panels(filter: np.ndarray, group: int, mr: int) -> np.ndarray:
    """int8 [Cout, Cin/g, kh, kw] -> bytes: per group and panel of ``mr`` channels, int8
    [quads, mr, 4] (each channel's 4 weights of a quad are one int32 for ``vpdpbusd`` to
    broadcast), then the int32 weight sums."""
    assert filter.dtype == np.int8, f"quads hold signed weights, not {filter.dtype}"
    return _panels(filter, group, mr, QUAD, np.int8)


def _fc_filter(weights: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(weights.T)[:, :, None, None]


@exact_packer(size=lambda shape, mr: _panels_bytes(shape[1], shape[0], 1, mr, QUAD, 1))
def int8_fc_quad_panels(weights: np.ndarray, mr: int) -> np.ndarray:
    """int8 [k, m] -> ``int8_quad_panels`` of the [m, k, 1, 1] filter."""
    return int8_quad_panels(_fc_filter(weights), 1, mr)


@exact_packer(size=lambda shape, mr: _panels_bytes(shape[1], shape[0], 1, mr, PAIR, 1))
def int8_fc_byte_pairs(weights: np.ndarray, mr: int) -> np.ndarray:
    """int8 [k, m] -> per panel of ``mr`` channels, int8 [pairs, mr, 2] (the pairs of
    ``int8_panels`` in one byte each), then the int32 weight sums."""
    assert weights.dtype == np.int8, f"byte pairs hold signed weights, not {weights.dtype}"
    return _panels(_fc_filter(weights), 1, mr, PAIR, np.int8)
