"""Fixtures: seeded generators, a temporary object cache, and a registry with the cpu plugin."""

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


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled objects go to a per-session temporary cache, never the user's."""
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "glow-cpu-cache"))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> plugins.BackendRegistry:
    """A fresh registry holding the in-tree cpu and interpreter plugins."""
    import glow_cpu.plugin
    import glow_interpreter.plugin

    reg = plugins.BackendRegistry()
    reg.register(glow_interpreter.plugin, "interpreter")
    reg.register(glow_cpu.plugin, "cpu")
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg
