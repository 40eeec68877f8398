"""dest = min(lhs, rhs), element-wise."""

import numpy as np

KIND = "Min"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, lhs, rhs):
    np.minimum(lhs, rhs, out=dest)
