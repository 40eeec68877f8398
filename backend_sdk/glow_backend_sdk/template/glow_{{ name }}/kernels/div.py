"""dest = lhs / rhs; integer kinds truncate toward zero."""

import numpy as np

KIND = "Div"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, lhs, rhs):
    if dest.dtype.kind in "iu":
        dest[...] = np.trunc(lhs / rhs)
    else:
        np.divide(lhs, rhs, out=dest)
