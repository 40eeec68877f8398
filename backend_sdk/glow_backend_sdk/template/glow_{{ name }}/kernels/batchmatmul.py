"""dest[b] = lhs[b] @ rhs[b]."""

import numpy as np

KIND = "BatchMatMul"
ELEMENT_KINDS = ("float32",)


def run(dest, lhs, rhs):
    np.matmul(lhs, rhs, out=dest)
