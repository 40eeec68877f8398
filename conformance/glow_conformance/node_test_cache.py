"""The ONNX node tests that newer onnx wheels generate, kept on disk between runs.

onnx releases from 1.17 on ship the node-test generators, not their data: running them
takes about ten seconds of CPU (onnx 1.23, 1884 tests), paid by every ``glow conformance``
run before its first case, while the worker processes wait. The generated tests are a
function of the generators' source and of the numpy that runs them, so they are stored
once, pickled (about 10 MB), under a key made of exactly those: onnx's version and the
size and modification time of every generator file, numpy's and Python's versions. Loading
them back takes a tenth of a second. Anything else (an unreadable directory, a truncated
or foreign entry) means generating again, never a failed run.

The cache is the user's own directory (``platformdirs.user_cache_dir("glow-conformance")``,
or ``$GLOW_CONFORMANCE_CACHE_DIR``), like glow-cpu's object cache: a pickle is trusted as
much as that directory is. ``GLOW_CONFORMANCE_CACHE_DIR=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnx
import platformdirs

from glow_core.cache import DiskCache

CACHE_ENV = "GLOW_CONFORMANCE_CACHE_DIR"
"""Where the generated node tests are kept; ``off`` keeps none."""

MAX_BYTES = 256 * 1024**2
"""A few onnx versions' worth of node tests (one is about 10 MB)."""

_DATA, _CHECKSUM = ".pickle", ".sha256"

T = TypeVar("T")


def cache_directory() -> Path | None:
    """The cache's directory, or None when ``$GLOW_CONFORMANCE_CACHE_DIR`` is ``off``."""
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    return Path(chosen or platformdirs.user_cache_dir("glow-conformance"))


def generator_key() -> str:
    """What the generated tests depend on: onnx's version and generator files (size and
    mtime, so an edited checkout of onnx counts as another), numpy's and Python's versions."""
    cases = Path(onnx.__file__).parent / "backend" / "test" / "case"
    digest = hashlib.sha256()
    digest.update(f"onnx {onnx.__version__}|numpy {np.__version__}|{sys.version}".encode())
    for path in sorted(cases.rglob("*.py")):
        stat = path.stat()
        digest.update(f"|{path.relative_to(cases)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return f"node-tests-{digest.hexdigest()[:32]}"


def cached(generate: Callable[[], T]) -> T:
    """``generate()``'s result, from the cache when an entry for this onnx is there, else
    generated now and stored."""
    directory = cache_directory()
    if directory is None:
        return generate()
    cache = DiskCache(
        directory,
        name="glow-conformance node-test cache",
        max_bytes=MAX_BYTES,
        hint=f"Point ${CACHE_ENV} at a writable directory, or set it to off.",
    )
    key = generator_key()
    stored = _load(cache, key)
    if stored is not None:
        return stored  # type: ignore[no-any-return]
    value = generate()
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    cache.write(key, {_DATA: data, _CHECKSUM: hashlib.sha256(data).hexdigest().encode()})
    return value


def _load(cache: DiskCache, key: str) -> Any | None:
    """The entry's value, or None: a miss, or an entry whose checksum does not match (a
    torn write, a foreign file), which is discarded."""
    files = cache.read(key, (_DATA, _CHECKSUM))
    if files is None:
        return None
    if hashlib.sha256(files[_DATA]).hexdigest().encode() != files[_CHECKSUM].strip():
        cache.discard(key, "its data does not match its checksum")
        return None
    try:
        return pickle.loads(files[_DATA])
    except Exception as err:  # written by an incompatible version of a library in the key's blind spot
        cache.discard(key, f"it cannot be read back ({type(err).__name__})")
        return None
