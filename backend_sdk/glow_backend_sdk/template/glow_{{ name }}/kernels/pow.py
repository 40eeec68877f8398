"""dest = lhs ** rhs."""

import numpy as np

from ..kinds import every_kind

KIND = "Pow"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    np.power(lhs, rhs, out=dest)
