"""Handing the C heap's free pages back to the system.

Big numpy arrays that die in the middle of the heap (a model's weights once copied, the
arrays a graph pass replaced, LLVM's module once it became object code) are free to malloc
but stay resident: ``free`` returns memory only from the heap's top. A compile that has just
let go of tens of megabytes calls ``trim_heap`` so the next stage's peak does not stack on
memory nobody uses (docs/performance.md, "Footprint").
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):  # another C library: nothing to do
        return None


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: every whole free page of the heap goes back to the system
    (a no-op elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
