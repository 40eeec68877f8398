"""dest = erf(input) (numpy has no erf: math.erf per element, slow but exact)."""

import math

import numpy as np

from ..kinds import every_kind

KIND = "Erf"
ELEMENT_KINDS = every_kind(KIND)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def run(dest, input):
    dest[...] = _erf(input)
