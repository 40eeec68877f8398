"""dest = lhs ** rhs."""

import numpy as np

KIND = "Pow"
ELEMENT_KINDS = ("float32",)


def run(dest, lhs, rhs):
    np.power(lhs, rhs, out=dest)
