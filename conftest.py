"""Fixtures every test folder shares: per-test seeds and a clean global backend registry.

Every compile in the test suite verifies after each pipeline step (``verify_each``): a pass
that leaves a broken graph or IR fails the test that ran it, named, not some later one.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest

import glow_core  # noqa: F401 - registers the declarations
from glow_core import plugins
from glow_core.pipeline.runner import set_verify_each_default


def pytest_configure(config: pytest.Config) -> None:
    """Verification after every step is on for the whole suite (users get it off by default)."""
    set_verify_each_default(True)


# Conformance runs draw fresh inputs per run unless a seed is pinned; the tests pin one (0:
# each case's inputs come from its id alone), here and in every `glow` subprocess they start.
os.environ.setdefault("GLOW_CONFORMANCE_SEED", "0")


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test id: different per test, stable across runs."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def install_registry(monkeypatch: pytest.MonkeyPatch) -> Callable[..., plugins.BackendRegistry]:
    """``install_registry(name=plugin_module, ...)``: a fresh registry holding exactly these
    plugins, installed as the global one for the test (never what happens to be installed)."""

    def install(**modules: ModuleType) -> plugins.BackendRegistry:
        reg = plugins.BackendRegistry()
        for name, module in modules.items():
            record = reg.register(module, name)
            assert record.error is None, record.error
        monkeypatch.setattr(plugins, "_REGISTRY", reg)
        return reg

    return install
