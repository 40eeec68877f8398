"""A bounded on-disk cache of compiled code: whole entries, least recently used evicted first.

A backend that keeps what it compiled between processes (glow-cpu's object code) stores each
entry as a few files named ``KEY.SUFFIX`` in one directory. This module owns what every such
cache needs, so each backend keys and decodes its entries and nothing else:

- **whole files only**: each file is written under a temporary name in the same directory and
  then ``os.replace``-d, in the order the caller gives (the one holding the checksum last), so
  two processes writing one entry at once both write whole files and a reader never sees half;
- **a size bound**: when a write takes the directory past its limit, it is trimmed to 90 % of
  it by deleting the entries used longest ago. A hit re-stamps the entry's files
  (``os.utime``), so the order is by last *use*, not by creation, and does not rely on atime
  (``noatime`` mounts);
- **a write costs the same in a full directory as in an empty one**: the bytes held are kept
  in a ledger file (``.usage``) that each write adds its bytes to, so the directory is listed
  only when the ledger says the bound is passed (or the ledger is missing). Listing and
  stat-ing every file on each write cost 2 s per write in a directory of 48,000 files, which
  made a conformance run of thousands of one-node compiles quadratic. The ledger may only
  over-count (an entry written twice is added twice; a deletion outside this class is not
  subtracted), which costs an early listing, never a broken bound;
- **several processes and threads**: one trim at a time per directory (an OS file lock through
  ``filelock``); a reader whose entry vanishes under it sees a miss; deleting an entry only
  ever costs a recompile;
- **never a failure**: a directory that cannot be created, read or written gives one
  ``CacheWarning`` per directory per process, and the compile goes on without it.

Why hand-written rather than ``diskcache``: entries here are plain files whose names are
content hashes, written once and never updated, which the file system already handles
atomically; ``diskcache`` adds an SQLite index (a second source of truth that must agree with
the files, and SQLite locking is unreliable on network file systems), pickles values by default,
and has not had a release since 2023. What is hard to get right by hand, a cross-platform
inter-process lock, comes from ``filelock``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from glow_core.errors import InputError

DEFAULT_MAX_BYTES = 1024**3
"""1 GiB: a compiled ResNet-50 entry is about 0.8 MiB, so over a thousand models fit."""

TRIM_TO = 0.9
"""A trim deletes down to this share of the limit, so the next few writes need not trim."""

STALE_TEMP_SECONDS = 3600.0
"""A temporary file this old belongs to a writer that died; younger ones may be being written."""

LOCK_NAME = ".trim.lock"
LEDGER_NAME = ".usage"
"""The bytes the directory holds, as the writers have added them up (see the module's doc)."""
LOCK_SECONDS = 10.0
"""How long a writer waits for another's trim before skipping its own (a hung file system)."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # cache directories already warned about in this process
_WARNED_LOCK = threading.Lock()


class CacheWarning(UserWarning):
    """A compile cache cannot be read or written: compiling goes on without it."""


def parse_size(text: str, what: str) -> int:
    """``"500M"``, ``"2G"``, ``"1.5GiB"`` or a byte count as bytes (powers of 1024);
    ``what`` names where the text came from for the error."""
    match = _SIZE.match(text)
    if not match:
        raise InputError(
            f"{what}={text!r} is not a size: give bytes or a number with K, M, G or T (e.g. 500M, 2G)"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    size = int(number * _UNITS[unit])
    if size < 1:
        raise InputError(f"{what}={text!r}: a cache needs at least one byte; turn it off instead")
    return size


def format_size(size: float) -> str:
    """Bytes for people: ``1.5 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def size_limit(chosen: int | None, env_var: str) -> int:
    """The size bound: ``chosen`` (an API option), else ``$env_var``, else ``DEFAULT_MAX_BYTES``."""
    if chosen is not None:
        return chosen
    text = os.environ.get(env_var)
    return parse_size(text, f"${env_var}") if text else DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class CacheUsage:
    """What a cache directory holds: whole entries (every file of one key) and their bytes."""

    directory: Path
    entries: int
    bytes: int
    max_bytes: int


@dataclass
class _Entry:
    key: str
    files: list[Path]
    bytes: int
    last_used: float


class DiskCache:
    """Entries of ``KEY.SUFFIX`` files in ``directory``, at most ``max_bytes`` in all.

    ``name`` says whose cache it is in warnings (``"glow-cpu object cache"``) and ``hint`` what
    to do when it cannot be used (which option or variable moves it).
    """

    def __init__(self, directory: str | os.PathLike[str], name: str, max_bytes: int, hint: str = ""):
        self.directory = Path(directory)
        self.name = name
        self.max_bytes = max_bytes
        self.hint = hint

    # ---- entries ---------------------------------------------------------------------------

    def read(self, key: str, suffixes: Iterable[str]) -> dict[str, bytes] | None:
        """The files of ``key``'s entry by suffix, or None: a miss (a file is missing, even if
        deleted while being read) or a cache that cannot be read (warned once). A hit marks the
        entry used now."""
        files = {}
        try:
            for suffix in suffixes:
                files[suffix] = self._path(key, suffix).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            self.warn("read", err)
            return None
        self._mark_used(key, files)
        return files

    def write(self, key: str, files: Mapping[str, bytes]) -> None:
        """Store ``files`` (suffix -> bytes) as ``key``'s entry, each file whole and in the
        given order, then trim the cache to its bound; a cache that cannot be written is
        skipped (warned once)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for suffix, data in files.items():
                _atomic_write(self._path(key, suffix), data)
        except OSError as err:
            self.warn("written", err)
            return
        self._account(sum(len(data) for data in files.values()))

    def discard(self, key: str, why: str) -> None:
        """Delete ``key``'s entry (best effort: a read-only cache keeps it)."""
        _log.info("%s: discarding entry %s in %s: %s", self.name, key, self.directory, why)
        for path in self._files_of(key):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        self._forget_ledger()  # recounted on the next write

    # ---- the whole directory ---------------------------------------------------------------

    def usage(self) -> CacheUsage:
        """Entries and bytes held now (an absent directory holds none)."""
        entries = self._entries()
        return CacheUsage(self.directory, len(entries), sum(e.bytes for e in entries), self.max_bytes)

    def trim(self) -> int:
        """Delete the least recently used entries until at most ``TRIM_TO`` of the bound is
        used, if it is exceeded; returns the bytes freed. One process or thread trims a
        directory at a time (a trim is a directory listing: milliseconds), so the last writer's
        trim sees every write before it and the bound holds once the writers are done."""
        return self._locked(lambda: self._trim_unlocked()[0])

    def _account(self, added: int) -> None:
        """Add a write's ``added`` bytes to the ledger; list and trim the directory only when
        that passes the bound, or when there is no ledger to add to."""

        def add() -> int:
            held = self._read_ledger()
            if held is None or held + added > self.max_bytes:
                return self._trim_unlocked()[0]  # counts afresh and writes the ledger
            self._write_ledger(held + added)
            return 0

        self._locked(add)

    def _locked(self, work: Callable[[], int]) -> int:
        """``work()`` under the directory's lock; 0 when the lock cannot be had in
        ``LOCK_SECONDS`` (a hung file system) or made (a read-only cache is not trimmed)."""
        from filelock import FileLock, Timeout

        try:
            lock = FileLock(self.directory / LOCK_NAME, timeout=LOCK_SECONDS, thread_local=False)
            with lock:
                return work()
        except Timeout:
            return 0
        except OSError as err:
            _log.info("%s: not trimming %s: %s", self.name, self.directory, err)
            return 0

    def clear(self) -> CacheUsage:
        """Delete every entry (and stray temporary file); returns what was deleted."""
        entries = self._entries(include_temporary=True)
        for entry in entries:
            self._delete(entry)
        self._forget_ledger()
        return CacheUsage(self.directory, len(entries), sum(e.bytes for e in entries), self.max_bytes)

    def warn(self, what: str, err: BaseException) -> None:
        """Say once per directory per process that the cache is not used, and why."""
        where = os.path.abspath(self.directory)
        with _WARNED_LOCK:
            if where in _WARNED:
                return
            _WARNED.add(where)
        warnings.warn(
            f"{self.name} {where} cannot be {what} ({type(err).__name__}: {err}); "
            f"compiling without it. {self.hint}".rstrip(),
            CacheWarning,
            stacklevel=5,
        )

    # ---- helpers ---------------------------------------------------------------------------

    def _path(self, key: str, suffix: str) -> Path:
        return self.directory / f"{key}{suffix}"

    def _files_of(self, key: str) -> list[Path]:
        try:
            return [p for p in self.directory.iterdir() if p.name.split(".", 1)[0] == key]
        except OSError:
            return []

    def _mark_used(self, key: str, files: Mapping[str, bytes]) -> None:
        now = time.time()
        for suffix in files:
            with contextlib.suppress(OSError):  # a read-only cache keeps its old order
                os.utime(self._path(key, suffix), (now, now))

    def _entries(self, include_temporary: bool = False) -> list[_Entry]:
        """The entries on disk, grouped by key; temporary files join them only when stale
        (a writer died) or when asked (``clear``)."""
        by_key: dict[str, _Entry] = {}
        now = time.time()
        try:
            listing = list(os.scandir(self.directory))
        except OSError:
            return []
        for item in listing:
            if item.name.startswith(".") or not item.is_file(follow_symlinks=False):
                continue
            try:
                stat = item.stat(follow_symlinks=False)
            except OSError:  # deleted since the listing
                continue
            young = now - stat.st_mtime < STALE_TEMP_SECONDS
            if item.name.endswith(".tmp") and young and not include_temporary:
                continue
            key = item.name.split(".", 1)[0]
            entry = by_key.setdefault(key, _Entry(key, [], 0, 0.0))
            entry.files.append(Path(item.path))
            entry.bytes += stat.st_size
            entry.last_used = max(entry.last_used, stat.st_mtime)
        return list(by_key.values())

    def _trim_unlocked(self) -> tuple[int, int]:
        """List the directory, delete down to ``TRIM_TO`` of the bound if it is passed, and
        write what is left into the ledger; returns (bytes freed, bytes left)."""
        entries = self._entries()
        total = sum(e.bytes for e in entries)
        freed = 0
        if total > self.max_bytes:
            goal = int(self.max_bytes * TRIM_TO)
            for entry in sorted(entries, key=lambda e: e.last_used):
                if total - freed <= goal:
                    break
                self._delete(entry)
                freed += entry.bytes
            _log.info("%s: trimmed %s by %d bytes to its bound of %d", self.name, self.directory, freed, goal)
        self._write_ledger(total - freed)
        return freed, total - freed

    def _read_ledger(self) -> int | None:
        """The ledger's byte count, or None when it is missing or unreadable (count afresh)."""
        try:
            return int((self.directory / LEDGER_NAME).read_text())
        except (OSError, ValueError):
            return None

    def _write_ledger(self, held: int) -> None:
        with contextlib.suppress(OSError):  # no ledger: the next write counts afresh
            _atomic_write(self.directory / LEDGER_NAME, str(held).encode())

    def _forget_ledger(self) -> None:
        with contextlib.suppress(OSError):
            (self.directory / LEDGER_NAME).unlink(missing_ok=True)

    @staticmethod
    def _delete(entry: _Entry) -> None:
        for path in entry.files:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
