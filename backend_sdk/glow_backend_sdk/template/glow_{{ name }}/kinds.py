"""What the numpy kernels run: every element kind glow defines, half floats widened.

A device kernel lists the kinds it really runs instead (``ELEMENT_KINDS = ("float32",)``);
the compiler then refuses, at compile time, models that need another.
"""

from __future__ import annotations

import numpy as np

from glow_core.spec import spec_of


def every_kind(kind: str) -> tuple[str, ...]:
    """Every element kind glow defines the primitive ``kind`` for: numpy computes them all."""
    return tuple(sorted(k.name for k in spec_of(kind).kinds))


def widened(x: np.ndarray) -> np.ndarray:
    """``x`` as sums and products see it: float16 and bfloat16 in float32, as a device
    accumulates them (summing in half precision loses digits the conformance tolerance
    does not allow); every other kind as it is."""
    if x.dtype.kind in "fV" and x.dtype.itemsize < 4:
        return x.astype(np.float32)
    return x
