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

A backend's ``info()`` is asked when it is first needed, not when its plugin loads: the
name comes from the class (``Backend.name``), and ``info()`` can be expensive (glow-opencl's
asks the OpenCL driver for its default device, 60 MB of resident memory in a process that
compiles for cpu only). Whatever looks at a plugin's state (its ``error``, ``backends`` or
``infos``, the registry's ``errors()``, ``glow backends``) asks first, so what is reported
about a broken plugin is what it was when every ``info()`` ran at load time. ``get(name)``
asks only the plugins that declare ``name``. A class with no ``name`` is asked at load time.
"""

from __future__ import annotations

import importlib.metadata
import threading
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
    """One plugin's load result: its backends, or the error that stopped it.

    ``declared`` holds the backend classes by name as the plugin's hook returned them;
    their ``info()`` runs on the first look at ``backends``, ``infos`` or ``error``
    (``resolve``), and an ``info()`` that fails is the plugin's error, as at load time.
    """

    name: str
    distribution: str = ""
    version: str = ""
    declared: dict[str, type[Backend]] = field(default_factory=dict)
    _infos: dict[str, BackendInfo] = field(default_factory=dict, repr=False)
    _error: str | None = field(default=None, repr=False)

    @property
    def error(self) -> str | None:
        self.resolve()
        return self._error

    @error.setter
    def error(self, message: str | None) -> None:
        self._error = message

    @property
    def backends(self) -> dict[str, type[Backend]]:
        """The working backends by name (none when the plugin failed)."""
        self.resolve()
        return {} if self._error else dict(self.declared)

    @property
    def infos(self) -> dict[str, BackendInfo]:
        self.resolve()
        return {} if self._error else dict(self._infos)

    def declares(self, backend: str) -> bool:
        """Whether the plugin's hook returned a backend named ``backend`` (no ``info()`` asked)."""
        return self._error is None and backend in self.declared

    def resolve(self) -> None:
        """Ask ``info()`` of every declared backend not yet asked; the first failure (or a
        name that differs from the class's) is the plugin's error and drops its backends."""
        with _RESOLVING:
            if self._error is not None:
                return
            for name, cls in self.declared.items():
                if name in self._infos:
                    continue
                try:
                    self._infos[name] = _checked_info(cls, name)
                except KeyboardInterrupt:
                    raise
                except BaseException as err:  # as at load time: a plugin never ends the process
                    self._infos.clear()
                    self._error = describe_error(err)
                    return


_RESOLVING = threading.RLock()
"""One ``info()`` at a time: threads that look at the registry together ask each backend once."""


def _declared_name(cls: type[Backend]) -> str | None:
    """The backend's name as its class declares it, or None when it declares none."""
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) and name else None


def _checked_info(cls: type[Backend], name: str) -> BackendInfo:
    """``cls().info()``, refused when it names the backend differently from the class."""
    info = cls().info()
    if info.name != name:
        raise BackendError(
            f"backend class {cls.__qualname__} is named {name!r} but its info() says {info.name!r}; "
            "make BackendInfo.name the class's `name` (one name per backend)"
        )
    return info


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
        """The hook's classes into ``record.declared``, by the name each class declares;
        ``info()`` waits for ``resolve``, except for a class that declares no name."""
        try:
            classes = list(hook())
            for cls in classes:
                if not (isinstance(cls, type) and issubclass(cls, Backend)):
                    raise BackendError(f"glow_backends() returned {cls!r}, which is not a Backend subclass")
                name = _declared_name(cls)
                if name is None:  # only info() knows it: asked now
                    info = cls().info()
                    name = info.name
                    record._infos[name] = info
                record.declared[name] = cls
        except KeyboardInterrupt:
            raise
        except BaseException as err:
            record.declared.clear()
            record._infos.clear()
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
        # Only the plugins that declare ``name`` are asked for their info(): a process that
        # compiles for cpu never starts an OpenCL driver.
        providers = [r for r in self.plugins.values() if r.declares(name) and name in r.backends]
        if len(providers) > 1:
            raise BackendError(_duplicate_message(name, None, providers))
        if not providers:
            infos = self.infos()
            broken = self.errors()
            hint = f"; failed plugins: {broken}" if broken else ""
            raise BackendError(
                f"no backend named {name!r}; installed: {sorted(infos)}{hint}. "
                f"Install it (e.g. `pip install glow-{name}`) or pick an installed one."
            )
        return providers[0].backends[name]()

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
