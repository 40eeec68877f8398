"""dest = exp(input)."""

import numpy as np

from ..kinds import every_kind

KIND = "Exp"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input):
    np.exp(input, out=dest)
