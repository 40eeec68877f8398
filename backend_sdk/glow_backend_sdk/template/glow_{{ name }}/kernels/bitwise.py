"""dest = lhs <op> rhs bit by bit: and, or, xor (not is xor with all ones)."""

import numpy as np

from ..kinds import every_kind

KIND = "Bitwise"
ELEMENT_KINDS = every_kind(KIND)

_OPS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def run(dest, lhs, rhs, *, op):
    _OPS[op](lhs, rhs, out=dest)
