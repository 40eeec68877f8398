"""``glow_core.heap.release_file_pages``: only a file's clean pages leave the process.

A page that was never written is the file's own bytes, so dropping it loses nothing: it is
mapped again from the page cache when read. A page this process wrote (a private copy, as
RELRO's are after relocation) holds bytes the file does not have: its mapping must be left
alone, whether it is still writable or was made read-only after the write.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from glow_core.heap import Mapping, file_mappings, release_file_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's smaps and madvise")

_PAGES = 64
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_LIBC.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


class _Mapped:
    """A private mapping of a whole file (as the loader maps a library's segments)."""

    def __init__(self, path: Path, prot: int):
        self.path = path
        self.size = path.stat().st_size
        with open(path, "rb") as file:
            address = _LIBC.mmap(None, self.size, prot, mmap.MAP_PRIVATE, file.fileno(), 0)
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        self.address: int = address

    def read(self) -> bytes:
        return ctypes.string_at(self.address, self.size)

    def write(self, data: bytes) -> None:
        ctypes.memmove(self.address, data, len(data))

    def protect(self, prot: int) -> None:
        assert _LIBC.mprotect(self.address, self.size, prot) == 0, ctypes.get_errno()

    def state(self) -> Mapping:
        (found,) = [m for m in file_mappings(self.path) if m.start == self.address]
        return found

    def close(self) -> None:
        _LIBC.munmap(self.address, self.size)


def _file(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, bytes]:
    data = rng.integers(0, 256, size=_PAGES * mmap.PAGESIZE, dtype=np.uint8).tobytes()
    path = tmp_path / "code.bin"
    path.write_bytes(data)
    return path, data


def test_clean_pages_go_and_read_back_the_same(tmp_path, rng) -> None:
    path, data = _file(tmp_path, rng)
    view = _Mapped(path, mmap.PROT_READ)
    assert view.read() == data  # every page resident now
    before = view.state()
    assert before.perms == "r--p" and before.clean_file_code
    assert before.resident == len(data)
    assert release_file_pages(path) == len(data)
    assert view.state().resident == 0
    assert view.read() == data  # faulted back from the page cache
    view.close()


def test_written_pages_stay_writable_or_made_read_only(tmp_path, rng) -> None:
    """A written private mapping, and one made read-only after the write (RELRO's case),
    keep their own bytes; a clean mapping of the same file beside them is released."""
    path, data = _file(tmp_path, rng)
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    writable, relro, clean = _Mapped(path, rw), _Mapped(path, rw), _Mapped(path, mmap.PROT_READ)
    changed = bytes(255 - b for b in data[:100])
    writable.write(changed)
    relro.write(changed)
    relro.protect(mmap.PROT_READ)
    assert clean.read() == data
    read_only = relro.state()
    assert read_only.perms == "r--p" and read_only.own > 0 and not read_only.clean_file_code
    assert not writable.state().clean_file_code
    # The clean mapping's pages go; of the two others, nothing (not even their clean pages:
    # the whole mapping is left alone once one page is its own).
    assert release_file_pages(path) == len(data)
    assert clean.state().resident == 0
    for view in (writable, relro):
        assert view.read() == changed + data[100:]
    for view in (writable, relro, clean):
        view.close()


def test_a_file_nothing_maps_releases_nothing(tmp_path) -> None:
    assert release_file_pages(tmp_path / "missing.so") == 0
