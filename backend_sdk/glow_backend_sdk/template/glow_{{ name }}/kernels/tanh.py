"""dest = tanh(input)."""

import numpy as np

from ..kinds import every_kind

KIND = "Tanh"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input):
    np.tanh(input, out=dest)
