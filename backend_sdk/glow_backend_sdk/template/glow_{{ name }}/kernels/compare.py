"""dest = lhs <predicate> rhs as bool: eq, lt or le (NaN compares false)."""

import numpy as np

from ..kinds import every_kind

KIND = "Compare"
ELEMENT_KINDS = every_kind(KIND)  # the kinds compared: the result is always bool

_PREDICATES = {"eq": np.equal, "lt": np.less, "le": np.less_equal}


def run(dest, lhs, rhs, *, predicate):
    dest[...] = _PREDICATES[predicate](lhs, rhs)
