"""dest = log(input)."""

import numpy as np

KIND = "Log"
ELEMENT_KINDS = ("float32",)


def run(dest, input):
    np.log(input, out=dest)
