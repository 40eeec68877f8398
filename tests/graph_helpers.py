"""Small builders shared by the graph-level tests."""

from __future__ import annotations

import zlib

import numpy as np

from glow_core.graph import Builder, Function, Module


def seeded_rng(name: str) -> np.random.Generator:
    """A generator seeded from ``name``: different per test, stable across runs."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def new_function() -> tuple[Module, Function, Builder]:
    """A module with one empty function ``main`` and a builder for it."""
    m = Module("m")
    fn = m.create_function("main")
    return m, fn, fn.builder()
