"""dest = min(lhs, rhs), element-wise."""

import numpy as np

from ..kinds import every_kind

KIND = "Min"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    np.minimum(lhs, rhs, out=dest)
