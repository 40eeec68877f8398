"""dest = lhs / rhs; integer kinds truncate toward zero."""

import numpy as np

from ..kinds import every_kind

KIND = "Div"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    if dest.dtype.kind in "iu":
        # Toward zero, computed in integers: a quotient through float64 is wrong past 2**53.
        quotient = np.floor_divide(lhs, rhs)
        quotient += (np.fmod(lhs, rhs) != 0) & ((lhs < 0) != (rhs < 0))
        dest[...] = quotient
    else:
        np.divide(lhs, rhs, out=dest)
