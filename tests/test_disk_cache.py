"""The bounded compile cache (glow_core/cache.py): least recently used entries go first, the
bound comes from the API, the environment or the default, and concurrent writers and
trimmers in threads and processes never leave a reader half an entry."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from glow_core.cache import DEFAULT_MAX_BYTES, DiskCache, parse_size, size_limit
from glow_core.errors import InputError

SUFFIXES = (".o", ".json")


def _payload(key: str, size: int) -> dict[str, bytes]:
    """An entry whose two files are derived from its key: a reader can tell a whole one."""
    body = hashlib.sha256(key.encode()).digest() * (size // 32 + 1)
    return {".o": body[:size], ".json": hashlib.sha256(body[:size]).hexdigest().encode()}


def _whole(key: str, files: dict[str, bytes]) -> bool:
    return files[".json"] == hashlib.sha256(files[".o"]).hexdigest().encode() and files[".o"].startswith(
        hashlib.sha256(key.encode()).digest()[:16]
    )


def _age(cache: DiskCache, key: str, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    for suffix in SUFFIXES:
        os.utime(cache.directory / f"{key}{suffix}", (stamp, stamp))


def _keys(cache: DiskCache) -> set[str]:
    return {p.name.split(".")[0] for p in cache.directory.iterdir() if not p.name.startswith(".")}


def test_trim_drops_least_recently_used_not_oldest_written(tmp_path):
    cache = DiskCache(tmp_path, "test cache", max_bytes=1000)
    for index, key in enumerate(["a", "b", "c"]):
        cache.write(key, _payload(key, 200))
        _age(cache, key, 100 - index)  # a written first, c last
    assert cache.read("a", SUFFIXES) is not None  # a used just now: it is the most recent
    cache.write("d", _payload("d", 200))  # 4 entries of 264 bytes > 1000: trim to <= 900
    assert _keys(cache) == {"a", "c", "d"}
    usage = cache.usage()
    assert usage.entries == 3 and usage.bytes <= 900


def test_under_the_bound_nothing_is_trimmed(tmp_path):
    cache = DiskCache(tmp_path, "test cache", max_bytes=10_000)
    for key in "abcde":
        cache.write(key, _payload(key, 500))
    assert _keys(cache) == set("abcde")
    assert cache.trim() == 0


def test_clear_deletes_entries_and_stray_temporary_files(tmp_path):
    cache = DiskCache(tmp_path, "test cache", max_bytes=10_000)
    for key in "abc":
        cache.write(key, _payload(key, 100))
    (tmp_path / "d.o123.tmp").write_bytes(b"half")
    removed = cache.clear()
    assert removed.entries == 4 and removed.bytes == 3 * 164 + 4
    assert cache.usage().entries == 0
    assert cache.read("a", SUFFIXES) is None


def test_a_dead_writers_temporary_file_is_trimmed_a_live_ones_kept(tmp_path):
    cache = DiskCache(tmp_path, "test cache", max_bytes=300)
    stale, young = tmp_path / "old.o1.tmp", tmp_path / "new.o2.tmp"
    stale.write_bytes(b"x" * 250)
    young.write_bytes(b"y" * 250)
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    cache.write("k", _payload("k", 100))
    assert not stale.exists() and young.exists()
    assert cache.read("k", SUFFIXES) is not None


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("123", 123),
        ("500M", 500 * 1024**2),
        ("2g", 2 * 1024**3),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("64 kb", 65536),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text, "$X") == size


@pytest.mark.parametrize("text", ["", "lots", "-5M", "2X", "0"])
def test_bad_size_says_what_to_give(text):
    with pytest.raises(InputError, match=r"\$X="):
        parse_size(text, "$X")


def test_bound_from_api_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("GLOW_TEST_CACHE_SIZE", raising=False)
    assert size_limit(None, "GLOW_TEST_CACHE_SIZE") == DEFAULT_MAX_BYTES
    monkeypatch.setenv("GLOW_TEST_CACHE_SIZE", "3M")
    assert size_limit(None, "GLOW_TEST_CACHE_SIZE") == 3 * 1024**2
    assert size_limit(4096, "GLOW_TEST_CACHE_SIZE") == 4096


def _hammer(directory: str, worker: int, rounds: int, errors: list[str]) -> None:
    """Write entries and read back others' under a bound that forces trims all the time."""
    cache = DiskCache(directory, "test cache", max_bytes=6000)
    for i in range(rounds):
        key = f"w{worker}k{i % 12}"  # a key always names the same bytes, as a content hash does
        cache.write(key, _payload(key, 300 + 37 * (i % 12)))
        for other in (f"w{(worker + 1) % 4}k{i % 12}", key):
            files = cache.read(other, SUFFIXES)
            if files is not None and not _whole(other, files):
                errors.append(f"{other}: a reader saw half an entry")


def _process_hammer(directory: str, worker: int) -> list[str]:
    errors: list[str] = []
    _hammer(directory, worker, 60, errors)
    return errors


def _check_bounded(directory: Path) -> None:
    cache = DiskCache(directory, "test cache", max_bytes=6000)
    assert cache.usage().bytes <= 6000
    for key in _keys(cache):
        files = cache.read(key, SUFFIXES)
        assert files is None or _whole(key, files)
    assert not list(directory.glob("*.tmp"))


def test_threads_write_read_and_trim_at_once(tmp_path):
    errors: list[str] = []
    threads = [threading.Thread(target=_hammer, args=(str(tmp_path), w, 60, errors)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _check_bounded(tmp_path)


def test_processes_write_read_and_trim_at_once(tmp_path):
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.starmap(_process_hammer, [(str(tmp_path), w) for w in range(3)])
    assert not [e for errors in results for e in errors]
    _check_bounded(tmp_path)


def test_a_write_under_the_bound_does_not_list_the_directory(tmp_path, monkeypatch):
    """The bytes held are a ledger each write adds to: listing every file on each write made
    thousands of compiles into a big cache quadratic (2 s a write at 48,000 files)."""
    cache = DiskCache(tmp_path, "test cache", max_bytes=10_000)
    cache.write("a", _payload("a", 100))  # no ledger yet: counted from the directory
    listings = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listings.append(path) or real_scandir(path))
    for key in "bcdefgh":
        cache.write(key, _payload(key, 100))
    assert listings == []
    assert cache.read("h", SUFFIXES) is not None
    monkeypatch.undo()
    assert int((tmp_path / ".usage").read_text()) == cache.usage().bytes == 8 * 164


def test_the_ledger_is_recounted_when_missing_or_broken(tmp_path):
    cache = DiskCache(tmp_path, "test cache", max_bytes=1000)
    for key in "abc":
        cache.write(key, _payload(key, 200))
    (tmp_path / ".usage").write_text("not a number")
    cache.write("d", _payload("d", 200))  # 4 x 264 bytes: the recount sees the bound passed
    assert cache.usage().bytes <= 900
    (tmp_path / ".usage").unlink()
    cache.write("e", _payload("e", 200))
    assert int((tmp_path / ".usage").read_text()) == cache.usage().bytes <= 1000


def test_clear_and_discard_reset_the_ledger(tmp_path):
    cache = DiskCache(tmp_path, "test cache", max_bytes=1000)
    for key in "abc":
        cache.write(key, _payload(key, 200))
    cache.discard("a", "test")
    assert not (tmp_path / ".usage").exists()
    cache.write("d", _payload("d", 200))
    assert int((tmp_path / ".usage").read_text()) == 3 * 264
    cache.clear()
    cache.write("e", _payload("e", 200))
    assert int((tmp_path / ".usage").read_text()) == 264
