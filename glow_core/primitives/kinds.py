"""Element-kind sets and helpers shared by the primitive declarations."""

from __future__ import annotations

import numpy as np

from glow_core.types import ALL_KINDS, FLOAT_KINDS, INT_KINDS, NARROW_KINDS, ElemKind, Type

NUMERIC_KINDS = FLOAT_KINDS | INT_KINDS
VALUE_KINDS = ALL_KINDS - NARROW_KINDS
"""Every kind but the narrow storage kinds (float8, float4, int4, int2), which only BitCast
reaches: data movement and selection declare these, so no backend is asked to move a narrow
tensor other than as its uint8 bytes."""
INDEX_KINDS = frozenset({ElemKind.int32, ElemKind.int64})


def clamped_index(indices: np.ndarray, extent: int) -> np.ndarray:
    """Run-time indices into an axis of ``extent`` as every backend reads them: negative ones
    count back from the end, and any still out of range is clamped to the nearest element.

    An index is data, known only when the function runs, and a compiled function has no way
    to stop half-way; clamping is what the generated code does so that a bad index can never
    read or write outside a buffer, and the reference must compute the same values.
    """
    wrapped = np.where(indices < 0, indices.astype(np.int64) + extent, indices.astype(np.int64))
    return np.clip(wrapped, 0, max(extent - 1, 0))


def wide(x: np.ndarray) -> np.ndarray:
    """Float operands are computed in float64 so the reference is an oracle, not a peer."""
    return x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.kind == "V" else x


def positive_tensor(rng: np.random.Generator, t: Type) -> np.ndarray:
    """Values in [0.1, 4) (integers in [1, 4]): for operands that must be positive (Log,
    Sqrt, Pow bases, divisors)."""
    if t.elem.is_float:
        return rng.uniform(0.1, 4.0, t.shape).astype(t.dtype)
    return rng.integers(1, 5, t.shape).astype(t.dtype)
