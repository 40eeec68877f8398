"""Fixtures: a registry holding the in-tree interpreter plus deliberately wrong backends.

Tests never rely on what is installed: the registry is built here and installed as the
process-wide one, so `glow conformance --backend wrong-add` finds the fakes.
"""

from __future__ import annotations

import os

import pytest
from conformance_fakes import FAKES, MORE_FAKES
from fake_plugins import plugin_module

import glow_core  # noqa: F401 - registers the declarations
from glow_core import plugins
from glow_core.plugins import BackendRegistry

pytest_plugins = ["pytester"]

# The run seed is pinned for the tests (the root conftest does the same; this folder is also
# run alone, with its own rootdir): each case's inputs come from its id, as before seeds.
os.environ.setdefault("GLOW_CONFORMANCE_SEED", "0")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> BackendRegistry:
    """The interpreter and every fake backend, installed as the global registry."""
    import glow_interpreter.plugin

    reg = BackendRegistry()
    reg.register(glow_interpreter.plugin, "interpreter")
    for cls in FAKES:
        record = reg.register(plugin_module(cls), cls.name)
        assert record.error is None, record.error
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg


@pytest.fixture
def more_fakes(registry: BackendRegistry) -> BackendRegistry:
    """The registry with the crashing, hanging and mutant backends added."""
    for cls in MORE_FAKES:
        record = registry.register(plugin_module(cls), cls.name)
        assert record.error is None, record.error
    return registry
