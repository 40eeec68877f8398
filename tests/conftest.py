"""Fixtures of the core tests: registries holding exactly the plugins a test runs on."""

from __future__ import annotations

import pytest

from glow_core import plugins


@pytest.fixture
def registry(install_registry) -> plugins.BackendRegistry:
    """A fresh registry holding only the in-tree interpreter plugin, installed as the global one."""
    import glow_interpreter.plugin

    return install_registry(interpreter=glow_interpreter.plugin)


@pytest.fixture
def interpreter(registry) -> str:
    """The interpreter's name, with a registry holding only it (for models that compile nothing
    or tests that need no other backend)."""
    return "interpreter"
