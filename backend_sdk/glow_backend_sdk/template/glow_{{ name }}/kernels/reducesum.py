"""Sum over axes, reduced dims kept with size 1."""

import numpy as np

from ..kinds import every_kind, widened

KIND = "ReduceSum"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, axes):
    dest[...] = np.sum(widened(input), axis=axes, keepdims=True)
