"""Fixtures: a temporary object cache and a registry with the cpu plugin (seeds: root conftest)."""

from __future__ import annotations

import pytest

import glow_core  # noqa: F401 - registers the declarations
from glow_core import plugins


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled objects go to a per-session temporary cache, never the user's."""
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "glow-cpu-cache"))


@pytest.fixture
def registry(install_registry) -> plugins.BackendRegistry:
    """A fresh registry holding the in-tree cpu and interpreter plugins."""
    import glow_cpu.plugin
    import glow_interpreter.plugin

    return install_registry(interpreter=glow_interpreter.plugin, cpu=glow_cpu.plugin)
