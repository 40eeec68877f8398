"""Fill dest with one value."""

import numpy as np

from ..kinds import every_kind

KIND = "Splat"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, *, shape, value, elem):
    np.copyto(dest, value, casting="unsafe")  # -1 in an unsigned kind wraps, as a C cast
