"""Sum over axes, reduced dims kept with size 1."""

import numpy as np

KIND = "ReduceSum"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, input, *, axes):
    np.sum(input, axis=axes, keepdims=True, out=dest)
