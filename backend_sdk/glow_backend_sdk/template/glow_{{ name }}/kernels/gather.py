"""Slices of data along axis at indices (negative indices count back; out of range ones are
clamped: an index is data, and a kernel must never read outside its buffer)."""

import numpy as np

from ..kinds import every_kind

KIND = "Gather"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, data, indices, *, axis):
    extent = data.shape[axis]
    wrapped = np.where(indices < 0, indices.astype(np.int64) + extent, indices)
    dest[...] = np.take(data, np.clip(wrapped, 0, max(extent - 1, 0)), axis=axis)
