"""dest = lhs * rhs."""

import numpy as np

from ..kinds import every_kind

KIND = "Mul"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    np.multiply(lhs, rhs, out=dest)
