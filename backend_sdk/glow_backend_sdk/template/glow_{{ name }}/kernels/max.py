"""dest = max(lhs, rhs), element-wise."""

import numpy as np

KIND = "Max"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, lhs, rhs):
    np.maximum(lhs, rhs, out=dest)
