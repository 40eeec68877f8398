"""dest = sqrt(input)."""

import numpy as np

from ..kinds import every_kind

KIND = "Sqrt"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input):
    np.sqrt(input, out=dest)
