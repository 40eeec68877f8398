"""dest = lhs * rhs."""

import numpy as np

KIND = "Mul"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, lhs, rhs):
    np.multiply(lhs, rhs, out=dest)
