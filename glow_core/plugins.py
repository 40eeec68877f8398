"""Backend plugins: pluggy hookspecs and entry-point discovery (group ``glow.backends``).

Each entry point names a module with pluggy hook implementations. Plugins are loaded one
at a time: a plugin that fails to import, misspells a hook, or returns something that is
not a working Backend is recorded with its error (``glow backends`` shows it) and never
stops the others from loading.
"""

from __future__ import annotations

import importlib.metadata
import traceback
from dataclasses import dataclass, field
from types import ModuleType

import pluggy

from glow_core.backend import Backend, BackendInfo
from glow_core.errors import BackendError

PROJECT = "glow"
ENTRY_POINT_GROUP = "glow.backends"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class BackendSpecs:
    """The hooks a backend plugin may implement."""

    @hookspec
    def glow_backends(self) -> list[type[Backend]]:  # type: ignore[empty-body]
        """Return the Backend classes this plugin provides."""


@dataclass
class PluginRecord:
    """One plugin's load result: its backends, or the error that stopped it."""

    name: str
    distribution: str = ""
    version: str = ""
    backends: dict[str, type[Backend]] = field(default_factory=dict)
    infos: dict[str, BackendInfo] = field(default_factory=dict)
    error: str | None = None


class BackendRegistry:
    """Loaded plugins and the backends they provide, by name."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(BackendSpecs)
        self.plugins: dict[str, PluginRecord] = {}

    def load_entry_points(self) -> None:
        """Load every installed plugin, each in isolation."""
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else ""
            version = ep.dist.version if ep.dist else ""
            record = PluginRecord(ep.name, dist, version)
            self.plugins[ep.name] = record
            try:
                module = ep.load()
            except Exception as err:
                record.error = _describe(err)
                continue
            self.register(module, ep.name, record)

    def register(
        self, module: ModuleType | object, name: str, record: PluginRecord | None = None
    ) -> PluginRecord:
        """Register one plugin object (tests register in-tree plugins this way)."""
        record = record or PluginRecord(name, distribution=f"<registered {name}>")
        self.plugins[name] = record
        try:
            self.pm.register(module, name=name)
            self.pm.check_pending()
        except Exception as err:
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            record.error = _describe(err)
            return record
        for impl in self.pm.hook.glow_backends.get_hookimpls():
            if impl.plugin is module:
                self._collect(impl.function, record)
        return record

    def unregister(self, name: str) -> None:
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)
        self.plugins.pop(name, None)

    def _collect(self, hook, record: PluginRecord) -> None:
        try:
            classes = list(hook())
            for cls in classes:
                if not (isinstance(cls, type) and issubclass(cls, Backend)):
                    raise BackendError(f"glow_backends() returned {cls!r}, which is not a Backend subclass")
                info = cls().info()
                record.backends[info.name] = cls
                record.infos[info.name] = info
        except Exception as err:
            record.backends.clear()
            record.infos.clear()
            record.error = _describe(err)

    def backends(self) -> dict[str, type[Backend]]:
        """Every working backend by name."""
        found: dict[str, type[Backend]] = {}
        for record in self.plugins.values():
            found.update(record.backends)
        return found

    def infos(self) -> dict[str, BackendInfo]:
        found: dict[str, BackendInfo] = {}
        for record in self.plugins.values():
            found.update(record.infos)
        return found

    def get(self, name: str | None = None) -> Backend:
        """A backend instance by name, or the best installed one (highest priority)."""
        infos = self.infos()
        if not infos:
            raise BackendError(
                "no glow backend is installed (or every one failed to load: run `glow backends`); "
                "install one, e.g. `pip install glow-interpreter`"
            )
        if name is None:
            name = max(infos.values(), key=lambda i: i.priority).name
        if name not in infos:
            broken = {r.name: r.error for r in self.plugins.values() if r.error}
            hint = f"; failed plugins: {broken}" if broken else ""
            raise BackendError(
                f"no backend named {name!r}; installed: {sorted(infos)}{hint}. "
                f"Install it (e.g. `pip install glow-{name}`) or pick an installed one."
            )
        return self.backends()[name]()


def _describe(err: BaseException) -> str:
    """One line: the exception type, its message, and where it was raised."""
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    place = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(err).__name__}: {err}{place}"


_REGISTRY: BackendRegistry | None = None


def registry() -> BackendRegistry:
    """The process-wide registry, loading entry points on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = BackendRegistry()
        _REGISTRY.load_entry_points()
    return _REGISTRY


def get_backend(name: str | None = None) -> Backend:
    """A backend instance by name, or the best installed one."""
    return registry().get(name)
