"""dest = lhs - rhs."""

import numpy as np

KIND = "Sub"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, lhs, rhs):
    np.subtract(lhs, rhs, out=dest)
