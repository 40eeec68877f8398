"""Maximum over axes, reduced dims kept with size 1."""

import numpy as np

from ..kinds import every_kind

KIND = "ReduceMax"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, axes):
    np.max(input, axis=axes, keepdims=True, out=dest)
