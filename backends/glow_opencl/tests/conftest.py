"""Fixtures: an OpenCL backend on a device that builds kernels (else a skip saying why),
per-test seeds, and a registry holding the in-tree plugins."""

from __future__ import annotations

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
def registry(install_registry) -> plugins.BackendRegistry:
    """A fresh global registry with the in-tree opencl and interpreter plugins, nothing installed."""
    import glow_interpreter.plugin
    import glow_opencl.plugin

    return install_registry(opencl=glow_opencl.plugin, interpreter=glow_interpreter.plugin)
