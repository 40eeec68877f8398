"""Fixtures: an OpenCL backend on a device that builds kernels (else a skip saying why),
per-test seeds, and a registry holding the in-tree plugins."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import glow_core  # noqa: F401 - registers the declarations
from glow_core import plugins
from glow_core.errors import BackendError


@pytest.fixture(scope="session")
def backend():
    """The OpenCL backend, once a device has built and run a probe kernel."""
    from glow_opencl.backend import OpenCLBackend
    from glow_opencl.runtime import select_device

    try:
        select_device(None)
    except BackendError as err:
        pytest.skip(f"no working OpenCL device ({err})")
    return OpenCLBackend()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test id: different per test, stable across runs."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> plugins.BackendRegistry:
    """A fresh global registry with the in-tree opencl and interpreter plugins, nothing installed."""
    import glow_interpreter.plugin
    import glow_opencl.plugin

    reg = plugins.BackendRegistry()
    reg.register(glow_opencl.plugin, "opencl")
    reg.register(glow_interpreter.plugin, "interpreter")
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg
