"""dest = floor(input): Ceil, Round, Mod and float-to-integer rounding lower to it."""

import numpy as np

from ..kinds import every_kind

KIND = "Floor"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input):
    np.floor(input, out=dest)
