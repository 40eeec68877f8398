"""dest = exp(input)."""

import numpy as np

KIND = "Exp"
ELEMENT_KINDS = ("float32",)


def run(dest, input):
    np.exp(input, out=dest)
