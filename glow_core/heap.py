"""Handing the C heap's free pages, and a library's clean code pages, back to the system.

Big numpy arrays that die in the middle of the heap (a model's weights once copied, the
arrays a graph pass replaced, LLVM's module once it became object code) are free to malloc
but stay resident: ``free`` returns memory only from the heap's top. A compile that has just
let go of tens of megabytes calls ``trim_heap`` so the next stage's peak does not stack on
memory nobody uses (docs/performance.md, "Footprint").

A shared library's machine code is file-backed: a page of it that was never written is the
file's own bytes, which the kernel can map again from its page cache at the next fault.
``release_file_pages`` unmaps such pages from this process, so a library that a compile no
longer needs (LLVM's, about 100 MB resident once imported) stops counting in its resident set
(docs/performance.md, "Footprint, round four").
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


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


_MADV_DONTNEED = 4  # Linux's value on every architecture
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61  # bits of a /proc/self/pagemap entry


@dataclass(frozen=True)
class Mapping:
    """One mapping of a file into this process, and what of it is resident."""

    start: int
    end: int
    perms: str
    path: str
    resident: int
    """Bytes of its pages mapped in now."""
    own: int
    """Bytes of its pages that are this process's own: written (a private copy) or swapped."""

    @property
    def clean_file_code(self) -> bool:
        """Read-only, private and backed by a file with no page of its own: every resident page
        is the file's bytes, so dropping it loses nothing. A page a process ever wrote (RELRO
        after relocation, text relocations, data) is its own, and one such page excludes the
        mapping. A mapping that is not writable gains none unless the process makes it
        writable again between this check and the release (nothing in glow or LLVM does)."""
        return "w" not in self.perms and self.perms.endswith("p") and self.own == 0


def file_mappings(path: str | os.PathLike[str]) -> list[Mapping]:
    """This process's mappings of ``path`` (none but on Linux, or where the kernel does not
    let a process read its own page map).

    The mappings come from ``/proc/self/maps`` and their pages' state from
    ``/proc/self/pagemap`` (8 bytes a page, for these mappings only): ``/proc/self/smaps``
    says the same but walks every mapping of the process, 50-75 ms for a compiling one."""
    target = os.path.realpath(path)  # the kernel names a mapping's file by its real path
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return []
    found = []
    try:
        for line in lines:
            fields = line.split(maxsplit=5)  # range, perms, offset, device, inode, path
            if len(fields) < 6 or fields[5] != target:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            page = mmap.PAGESIZE
            entries = os.pread(pagemap, (end - start) // page * 8, start // page * 8)
            flags = np.frombuffer(entries, dtype=np.uint64)
            present = (flags & np.uint64(_PRESENT)) != 0
            own = (present & ((flags & np.uint64(_FILE)) == 0)) | ((flags & np.uint64(_SWAPPED)) != 0)
            found.append(
                Mapping(start, end, fields[1], target, int(present.sum()) * page, int(own.sum()) * page)
            )
    except OSError:
        return []
    finally:
        os.close(pagemap)
    return found


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


def release_file_pages(path: str | os.PathLike[str]) -> int:
    """Unmap the resident pages of ``path``'s clean mappings (``Mapping.clean_file_code``) from
    this process; the bytes that were resident there (0 elsewhere than Linux).

    Correct at any time, even while another thread runs the code: a page it touches next is
    mapped again from the page cache (a minor fault; a major one only if the system evicted
    it meanwhile). Worth calling once the code is not needed for a while, since what runs
    again comes back. About 1-10 ms for LLVM's library.
    """
    madvise = _madvise()
    if madvise is None:
        return 0
    released = 0
    for m in file_mappings(path):
        if m.resident and m.clean_file_code and madvise(m.start, m.end - m.start, _MADV_DONTNEED) == 0:
            released += m.resident
    return released
