"""Backend plugins: pluggy hookspecs and entry-point discovery (group ``glow.backends``).

Each entry point names a module with pluggy hook implementations. Plugins are loaded one
at a time, and nothing a plugin does stops the others from loading or stops glow: a plugin
that fails to import (even by calling ``sys.exit()``), misspells a hook, or returns
something that is not a working Backend is recorded with its error (``glow backends``
shows it). Only ``KeyboardInterrupt`` goes through: the user asked to stop.

A backend name provided by two plugins is an error of both, and neither is used under that
name: which one ran would depend on install order. The default backend (no name given) is
the highest-priority one that compiles and runs a trivial function (``runtime/self_test.py``),
so a plugin that claims a high priority but cannot compile never becomes everyone's default.
"""

from __future__ import annotations

import importlib.metadata
import traceback
from collections import defaultdict
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
            name = self._unique_name(ep.name, dist)
            record = PluginRecord(name, dist, version)
            self.plugins[name] = record
            try:
                module = ep.load()
            except KeyboardInterrupt:
                raise
            except BaseException as err:  # SystemExit too: a plugin never ends the process
                record.error = describe_error(err)
                continue
            self.register(module, name, record)

    def _unique_name(self, name: str, distribution: str) -> str:
        """``name``, or ``name (distribution)`` when another plugin took it: each is kept."""
        candidate, count = name, 1
        while candidate in self.plugins:
            count += 1
            candidate = f"{name} ({distribution or 'unknown distribution'})"
            candidate += f" #{count}" if count > 2 else ""
        return candidate

    def register(
        self, module: ModuleType | object, name: str, record: PluginRecord | None = None
    ) -> PluginRecord:
        """Register one plugin object (tests register in-tree plugins this way)."""
        record = record or PluginRecord(name, distribution=f"<registered {name}>")
        self.plugins[name] = record
        try:
            self.pm.register(module, name=name)
            self.pm.check_pending()
        except KeyboardInterrupt:
            raise
        except BaseException as err:
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            record.error = describe_error(err)
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
        except KeyboardInterrupt:
            raise
        except BaseException as err:
            record.backends.clear()
            record.infos.clear()
            record.error = describe_error(err)

    def backends(self) -> dict[str, type[Backend]]:
        """Every working backend by name (a name two plugins provide is neither's)."""
        shared = self.duplicates()
        return {
            name: cls
            for record in self.plugins.values()
            for name, cls in record.backends.items()
            if name not in shared
        }

    def infos(self) -> dict[str, BackendInfo]:
        """The declared facts of every working backend, by name."""
        shared = self.duplicates()
        return {
            name: info
            for record in self.plugins.values()
            for name, info in record.infos.items()
            if name not in shared
        }

    def duplicates(self) -> dict[str, list[PluginRecord]]:
        """Backend names that more than one plugin provides, with those plugins."""
        providers: dict[str, list[PluginRecord]] = defaultdict(list)
        for record in self.plugins.values():
            for name in record.backends:
                providers[name].append(record)
        return {name: records for name, records in providers.items() if len(records) > 1}

    def errors(self) -> dict[str, str]:
        """What is wrong with each broken plugin, by plugin name: its load error, and every
        backend name it shares with another plugin."""
        problems: dict[str, list[str]] = {r.name: [r.error] for r in self.plugins.values() if r.error}
        for backend, records in self.duplicates().items():
            for record in records:
                problems.setdefault(record.name, []).append(_duplicate_message(backend, record, records))
        return {name: "; ".join(messages) for name, messages in problems.items()}

    def get(self, name: str | None = None) -> Backend:
        """A backend instance by name, or the best working one (see ``default``)."""
        if name is None:
            return self.default()
        shared = self.duplicates().get(name)
        if shared:
            raise BackendError(_duplicate_message(name, None, shared))
        infos = self.infos()
        if name not in infos:
            broken = self.errors()
            hint = f"; failed plugins: {broken}" if broken else ""
            raise BackendError(
                f"no backend named {name!r}; installed: {sorted(infos)}{hint}. "
                f"Install it (e.g. `pip install glow-{name}`) or pick an installed one."
            )
        return self.backends()[name]()

    def default(self) -> Backend:
        """The highest-priority backend that compiles and runs a trivial function (each
        backend class is tried once per process); the error names every plugin and why."""
        from glow_core.runtime.self_test import self_test  # the runtime imports this module

        backends, infos = self.backends(), self.infos()
        problems = self.errors()
        if not infos and not problems:
            raise BackendError(
                "no glow backend is installed; install one, e.g. `pip install glow-interpreter`"
            )
        failed = []
        for info in sorted(infos.values(), key=lambda i: -i.priority):  # stable: ties keep load order
            why = self_test(backends[info.name])
            if why is None:
                return backends[info.name]()
            failed.append(f"backend {info.name!r} (priority {info.priority}) fails its self-test: {why}")
        failed += [f"plugin {name!r}: {error}" for name, error in problems.items()]
        raise BackendError(
            "no installed glow backend works: "
            + "; ".join(failed)
            + ". Run `glow backends` for the list; install a working one, e.g. `pip install glow-interpreter`"
        )


def _duplicate_message(backend: str, record: PluginRecord | None, records: list[PluginRecord]) -> str:
    """Why backend name ``backend`` is unusable, as seen from ``record`` (None: from outside)."""
    others = [r for r in records if r is not record]
    named = ", ".join(f"{r.name!r} ({r.distribution or 'unknown'} {r.version})".rstrip() for r in others)
    subject = "also provided by" if record is not None else "provided by several plugins:"
    return (
        f"backend name {backend!r} is {subject} {named}, so it is not used from any of them; "
        "uninstall all but one of these distributions"
    )


def describe_error(err: BaseException) -> str:
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
