"""dest = sqrt(input)."""

import numpy as np

KIND = "Sqrt"
ELEMENT_KINDS = ("float32",)


def run(dest, input):
    np.sqrt(input, out=dest)
