"""Zeroed arenas (``glow_core.huge_pages``): aligned, zeroed, writable, the right size; the
large ones mapped on their own and advised for huge pages where the system can."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from glow_core.huge_pages import HUGE_PAGE, zeroed_bytes


@pytest.mark.parametrize("nbytes", [1, 4096, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 100])
@pytest.mark.parametrize("alignment", [64, 4096, 48])
def test_arena_is_zeroed_aligned_writable_and_sized(nbytes, alignment, rng):
    arena = zeroed_bytes(nbytes, alignment)
    assert arena.dtype == np.uint8 and arena.shape == (nbytes,)
    assert arena.ctypes.data % alignment == 0
    assert not arena.any(), "an arena starts zeroed"
    values = rng.integers(0, 256, nbytes, dtype=np.uint8)
    arena[:] = values
    assert np.array_equal(arena, values)


def _vma_flags(address: int) -> list[str]:
    """The ``VmFlags`` of the mapping holding ``address`` in ``/proc/self/smaps``."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(part, 16) for part in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or not hasattr(mmap, "MADV_HUGEPAGE")
    or not Path("/sys/kernel/mm/transparent_hugepage/enabled").exists(),
    reason="needs Linux with transparent huge pages and a Python with mmap.MADV_HUGEPAGE",
)
def test_large_arena_is_private_huge_page_aligned_and_advised():
    """From 2 MiB on: a private anonymous mapping (shared memory's huge pages are off by
    default), 2 MiB aligned, marked for huge pages ("hg") before anything touched it."""
    arena = zeroed_bytes(5 * HUGE_PAGE)
    assert arena.ctypes.data % HUGE_PAGE == 0
    flags = _vma_flags(arena.ctypes.data)
    assert "hg" in flags, flags
    assert "sh" not in flags, "a shared mapping"
