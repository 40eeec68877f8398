"""A plugin module made on the fly for fake backends (imported by name from the tests: a
``from conftest import ...`` finds whichever conftest module was imported first when the
whole repository runs in one pytest session)."""

from __future__ import annotations

import types

from glow_core.backend import Backend
from glow_core.plugins import hookimpl


def plugin_module(*classes: type[Backend]) -> types.ModuleType:
    """A plugin module whose ``glow_backends`` hook returns ``classes``."""
    module = types.ModuleType(f"fake_plugin_{'_'.join(c.name for c in classes)}")

    @hookimpl
    def glow_backends() -> list[type[Backend]]:
        return list(classes)

    module.glow_backends = glow_backends  # type: ignore[attr-defined]
    return module
