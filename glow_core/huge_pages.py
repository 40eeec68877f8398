"""Zeroed byte arenas on transparent huge pages, where the system gives them.

A compiled model's constants and activations are read over and over, tens of megabytes of
them: on 4 KiB pages each run walks thousands of page-table entries (a ResNet-50's weights
alone are 25,000 pages), on 2 MiB pages a few dozen. Linux backs anonymous memory with huge
pages only where asked (``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` on
most distributions): an arena of at least ``HUGE_PAGE`` bytes is therefore mapped on its own,
2 MiB aligned, and marked ``MADV_HUGEPAGE`` before anything touches it.

Without this, whether an arena got huge pages was an accident of the C heap: numpy asks for
them on large allocations, which the kernel grants only for whole aligned 2 MiB blocks of
memory not yet touched. In one process the first model compiled landed on small pages and
the ones after it mostly on huge ones, and the first ran 3-6% slower than identical later
builds (MobileNetV2, batch 1, one thread, Intel Xeon; docs/performance.md). Every user's
process starts with a first build.

Where the call is not there (another system, a Python without ``mmap.MADV_HUGEPAGE``) or
the kernel refuses, the arena is ordinary memory: huge pages are a hint, never a
requirement.
"""

from __future__ import annotations

import contextlib
import mmap

import numpy as np

HUGE_PAGE = 2 << 20
"""x86-64's and AArch64's (4 KiB granule) transparent huge page."""


def zeroed_bytes(nbytes: int, alignment: int = 64) -> np.ndarray:
    """A writable, zeroed uint8 array of ``nbytes`` starting on an ``alignment`` boundary;
    from ``HUGE_PAGE`` bytes on (with an alignment that divides it), a mapping of its own,
    2 MiB aligned and advised for huge pages."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    private = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if nbytes < HUGE_PAGE or advice is None or not private or HUGE_PAGE % alignment:
        raw = np.zeros(nbytes + alignment, np.uint8)
        start = -raw.ctypes.data % alignment
        return raw[start : start + nbytes]
    # private and anonymous: zero-filled, page aligned, and anonymous memory's huge pages
    # (a shared mapping, ``mmap``'s default, is shared memory, whose huge pages are off)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=private, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    raw = np.frombuffer(mapping, np.uint8)  # keeps the mapping alive as its base
    start = -raw.ctypes.data % HUGE_PAGE
    length = (nbytes // HUGE_PAGE) * HUGE_PAGE
    with contextlib.suppress(OSError):  # a kernel without transparent huge pages: small pages
        mapping.madvise(advice, start, length)
    return raw[start : start + nbytes]
