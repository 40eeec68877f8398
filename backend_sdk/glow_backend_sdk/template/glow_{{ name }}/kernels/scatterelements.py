"""dest = data with updates written at indices along axis; reduction none (last duplicate
wins), add, mul, max or min combines with the value already there. Negative indices count
back; out of range ones are clamped, so a write never lands outside data."""

import numpy as np

from ..kinds import every_kind

KIND = "ScatterElements"
ELEMENT_KINDS = every_kind(KIND)

_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def run(dest, data, indices, updates, *, axis, reduction):
    axis %= data.ndim
    where = list(np.indices(indices.shape))  # every coordinate of updates...
    extent = data.shape[axis]
    wrapped = np.where(indices < 0, indices.astype(np.int64) + extent, indices)  # ...moved along axis,
    where[axis] = np.clip(wrapped, 0, extent - 1)  # out of range ones clamped, never outside data
    result = data.copy()
    if reduction == "none":
        result[tuple(where)] = updates
    else:
        _COMBINE[reduction].at(result, tuple(where), updates)
    dest[...] = result
