"""dest = max(lhs, rhs), element-wise."""

import numpy as np

from ..kinds import every_kind

KIND = "Max"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    np.maximum(lhs, rhs, out=dest)
