"""dest = cond ? lhs : rhs, element by element."""

import numpy as np

from ..kinds import every_kind

KIND = "Select"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, cond, lhs, rhs):
    # np.where builds the result before it is stored: dest may be lhs's or rhs's buffer.
    dest[...] = np.where(cond, lhs, rhs)
