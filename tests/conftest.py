"""Shared fixtures: per-test seeds and a clean backend registry with the in-tree plugins."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import glow_core  # noqa: F401 - registers the declarations
from glow_core import plugins


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test id: different per test, stable across runs."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> plugins.BackendRegistry:
    """A fresh registry holding only the in-tree interpreter plugin, installed as the global one."""
    import glow_interpreter.plugin

    reg = plugins.BackendRegistry()
    reg.register(glow_interpreter.plugin, "interpreter")
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg
