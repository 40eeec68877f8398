"""dest = lhs + rhs."""

import numpy as np

from ..kinds import every_kind

KIND = "Add"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    np.add(lhs, rhs, out=dest)
