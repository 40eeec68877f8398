"""Installing a backend for one test: the plugin with the interpreter beside it, or a skip."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from glow_core import plugins
from glow_core.errors import BackendError


def install_backend(install_registry: Callable[..., plugins.BackendRegistry], name: str) -> str:
    """Install backend ``name`` with the interpreter beside it; skip the test when its plugin
    is not installed or (opencl) no device builds a kernel. Returns ``name``."""
    import glow_interpreter.plugin

    modules = {"interpreter": glow_interpreter.plugin}
    if name != "interpreter":
        modules[name] = pytest.importorskip(f"glow_{name}.plugin")
    if name == "opencl":
        from glow_opencl.runtime import select_device

        try:
            select_device(None)
        except BackendError as err:
            pytest.skip(f"no working OpenCL device ({err})")
    install_registry(**modules)
    return name
