"""dest = log(input)."""

import numpy as np

from ..kinds import every_kind

KIND = "Log"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input):
    np.log(input, out=dest)
