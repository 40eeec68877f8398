"""Plugin discovery: failures are kept per plugin and never stop the others."""

from __future__ import annotations

import importlib.metadata
import types

import pytest

from glow_core import plugins
from glow_core.backend import Backend, BackendInfo
from glow_core.errors import BackendError
from glow_core.plugins import BackendRegistry, hookimpl


def _entry_point(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=plugins.ENTRY_POINT_GROUP)


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch):
    """Entry points: the real interpreter, one that raises on import, one with a bad hook."""
    broken = types.ModuleType("glow_test_broken_hook")

    @hookimpl
    def glow_backends():
        return ["not a backend"]

    broken.glow_backends = glow_backends
    import sys

    monkeypatch.setitem(sys.modules, "glow_test_broken_hook", broken)
    eps = [
        _entry_point("interpreter", "glow_interpreter.plugin"),
        _entry_point("exploding", "glow_test_no_such_module_xyz"),
        _entry_point("badhook", "glow_test_broken_hook"),
    ]
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group]
    )
    reg = BackendRegistry()
    reg.load_entry_points()
    monkeypatch.setattr(plugins, "_REGISTRY", reg)
    return reg


def test_broken_plugins_are_listed_and_the_interpreter_still_works(fake_entry_points):
    reg = fake_entry_points
    assert "ModuleNotFoundError" in reg.plugins["exploding"].error
    assert "not a Backend subclass" in reg.plugins["badhook"].error
    assert reg.plugins["interpreter"].error is None
    assert list(reg.backends()) == ["interpreter"]
    assert reg.get().info().name == "interpreter"


def test_glow_backends_command_shows_the_errors(fake_entry_points, capsys):
    from glow_core.cli import main

    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "exploding" in out and "FAILED: ModuleNotFoundError" in out
    assert "interpreter" in out and "ok (reference)" in out


def test_misspelled_hook_is_an_error():
    reg = BackendRegistry()
    module = types.ModuleType("typo_plugin")

    @hookimpl
    def glow_backend():  # missing the s
        return []

    module.glow_backend = glow_backend
    record = reg.register(module, "typo")
    assert record.error and "glow_backend" in record.error
    assert not reg.pm.is_registered(module)


def test_missing_backend_names_what_is_installed(registry):
    with pytest.raises(BackendError, match=r"no backend named 'tpu'; installed: \['interpreter'\]"):
        registry.get("tpu")


def test_empty_registry_says_how_to_install():
    with pytest.raises(BackendError, match="pip install glow-interpreter"):
        BackendRegistry().get()


def test_best_backend_is_the_highest_priority(registry):
    class FancyBackend(Backend):
        name = "fancy"

        def info(self) -> BackendInfo:
            return BackendInfo(name="fancy", version="1", device="cpu", supports={}, priority=99)

        def compile(self, ir, options):
            raise NotImplementedError

    plugin = types.ModuleType("fancy_plugin")
    plugin.glow_backends = hookimpl(lambda: [FancyBackend])
    registry.register(plugin, "fancy")
    assert registry.get().info().name == "fancy"
    assert registry.get("interpreter").info().name == "interpreter"
