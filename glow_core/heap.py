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
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


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


@dataclass(frozen=True)
class Mapping:
    """One mapping of ``/proc/self/smaps``: where, its permissions, its file and what is resident."""

    start: int
    end: int
    perms: str
    path: str
    rss_kb: int
    anonymous_kb: int

    @property
    def clean_file_code(self) -> bool:
        """Read-only, private and backed by a file with no page of its own: every resident page
        is the file's bytes, so dropping it loses nothing. A page a process ever wrote (RELRO
        after relocation, text relocations, data) is anonymous, and one such page excludes the
        mapping; a mapping that is not writable cannot gain one."""
        return "w" not in self.perms and self.perms.endswith("p") and self.anonymous_kb == 0


def mappings() -> list[Mapping]:
    """This process's mappings as ``/proc/self/smaps`` lists them (none but on Linux)."""
    try:
        with open("/proc/self/smaps") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return []
    found: list[Mapping] = []
    current: dict | None = None
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        if not fields[0].endswith(":"):  # a mapping's first line: range, perms, offset, dev, inode, path
            if current is not None:
                found.append(Mapping(**current))
            start, end = (int(x, 16) for x in fields[0].split("-"))
            path = " ".join(fields[5:])  # a path may hold spaces; none for anonymous memory
            current = {
                "start": start,
                "end": end,
                "perms": fields[1],
                "path": path,
                "rss_kb": 0,
                "anonymous_kb": 0,
            }
        elif current is not None and fields[0] == "Rss:":
            current["rss_kb"] = int(fields[1])
        elif current is not None and fields[0] == "Anonymous:":
            current["anonymous_kb"] = int(fields[1])
    if current is not None:
        found.append(Mapping(**current))
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
    again comes back.
    """
    madvise = _madvise()
    if madvise is None:
        return 0
    target = os.path.realpath(path)  # the kernel names a mapping's file by its real path
    released = 0
    for m in mappings():
        if (
            m.rss_kb
            and m.clean_file_code
            and m.path == target
            and madvise(m.start, m.end - m.start, _MADV_DONTNEED) == 0
        ):
            released += m.rss_kb * 1024
    return released
