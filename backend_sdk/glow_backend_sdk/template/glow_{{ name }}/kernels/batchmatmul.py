"""dest[b] = lhs[b] @ rhs[b]."""

import numpy as np

from ..kinds import every_kind, widened

KIND = "BatchMatMul"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, lhs, rhs):
    dest[...] = np.matmul(widened(lhs), widened(rhs))
