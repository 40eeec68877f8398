"""dest = lhs / rhs; integer kinds truncate toward zero."""

import numpy as np

from ..kinds import every_kind

KIND = "Div"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    if dest.dtype.kind in "iu":
        dest[...] = np.trunc(lhs / rhs)
    else:
        np.divide(lhs, rhs, out=dest)
