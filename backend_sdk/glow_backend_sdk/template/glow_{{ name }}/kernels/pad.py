"""Fill dest with value, then copy input into its interior (pads: all begins, then all ends)."""

import numpy as np

from ..kinds import every_kind

KIND = "Pad"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, pads, value):
    np.copyto(dest, value, casting="unsafe")  # -1 in an unsigned kind wraps, as a C cast
    rank = input.ndim
    interior = tuple(slice(pads[i], pads[i] + input.shape[i]) for i in range(rank))
    dest[interior] = input
