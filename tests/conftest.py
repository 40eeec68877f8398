"""Fixtures of the core tests: a registry with the in-tree interpreter plugin only."""

from __future__ import annotations

import pytest

from glow_core import plugins


@pytest.fixture
def registry(install_registry) -> plugins.BackendRegistry:
    """A fresh registry holding only the in-tree interpreter plugin, installed as the global one."""
    import glow_interpreter.plugin

    return install_registry(interpreter=glow_interpreter.plugin)
