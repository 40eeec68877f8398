"""Maximum over axes, reduced dims kept with size 1."""

import numpy as np

KIND = "ReduceMax"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, input, *, axes):
    np.max(input, axis=axes, keepdims=True, out=dest)
