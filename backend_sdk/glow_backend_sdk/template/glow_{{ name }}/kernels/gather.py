"""Slices of data along axis at indices (negative indices count back)."""

import numpy as np

from ..kinds import every_kind

KIND = "Gather"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, data, indices, *, axis):
    dest[...] = np.take(data, indices, axis=axis)
