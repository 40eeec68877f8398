"""dest = lhs - rhs."""

import numpy as np

from ..kinds import every_kind

KIND = "Sub"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    np.subtract(lhs, rhs, out=dest)
