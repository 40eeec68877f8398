"""dest = running sum or product along axis; exclusive starts from the identity, reverse
runs from the end."""

import numpy as np

from ..kinds import every_kind, widened

KIND = "CumReduce"
ELEMENT_KINDS = every_kind(KIND)

_OPS = {"sum": (np.cumsum, 0), "prod": (np.cumprod, 1)}


def run(dest, input, *, axis, op, exclusive, reverse):
    axis %= input.ndim
    scan, identity = _OPS[op]
    x = widened(input)
    if reverse:
        x = np.flip(x, axis)
    running = scan(x, axis=axis, dtype=x.dtype)
    if exclusive:  # element i holds the reduction of elements before i
        shifted = np.full_like(running, identity)
        inner = [slice(None)] * x.ndim
        outer = [slice(None)] * x.ndim
        inner[axis], outer[axis] = slice(1, None), slice(None, -1)
        shifted[tuple(inner)] = running[tuple(outer)]
        running = shifted
    dest[...] = np.flip(running, axis) if reverse else running
