"""dest = int64 index of the largest element along axis (kept with size 1); ties: first,
or last with select_last."""

import numpy as np

from ..kinds import every_kind

KIND = "ArgMax"
ELEMENT_KINDS = every_kind(KIND)  # the kinds read: the result is always int64


def run(dest, input, *, axis, select_last):
    axis %= input.ndim
    if select_last:
        index = input.shape[axis] - 1 - np.argmax(np.flip(input, axis), axis=axis)
    else:
        index = np.argmax(input, axis=axis)
    dest[...] = np.expand_dims(index, axis)
