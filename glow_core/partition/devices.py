"""The caller's ordered backend list -> Devices, each with its own validated options.

``options`` for a list is either one mapping applied to every device (each backend
validates it, so a key one of them lacks is refused by name), or a mapping from a backend
name or device label to that device's options (``{"cpu": {"threads": 1}}``). Labels are
the backend names, ``name:K`` (K counting from 0) when a name repeats, so two ``cpu``
devices are ``cpu:0`` and ``cpu:1``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from glow_core.backend import Backend, BackendOptions
from glow_core.errors import BackendError
from glow_core.partition.plan import Device
from glow_core.plugins import get_backend

BackendSpec = str | Backend
OptionsSpec = Mapping[str, Any] | BackendOptions | None


def split_backend_list(text: str) -> list[str]:
    """``"acme,cpu"`` -> ``["acme", "cpu"]`` (the CLI's ``--backend`` form)."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise BackendError(f"--backend {text!r}: an empty name in the list; write e.g. acme,cpu")
    return names


def device_labels(names: Sequence[str]) -> list[str]:
    """``name`` for a backend named once, ``name:K`` for the K-th of a repeated one."""
    counts = Counter(names)
    seen: Counter[str] = Counter()
    labels = []
    for name in names:
        labels.append(name if counts[name] == 1 else f"{name}:{seen[name]}")
        seen[name] += 1
    return labels


def resolve_devices(backends: Sequence[BackendSpec], options: OptionsSpec = None) -> list[Device]:
    """One Device per entry of ``backends``; an unknown name is refused with the list it was in."""
    if not backends:
        raise BackendError("the backend list is empty; name at least one backend (e.g. ['cpu'])")
    instances: list[Backend] = []
    for spec in backends:
        if isinstance(spec, Backend):
            instances.append(spec)
            continue
        try:
            instances.append(get_backend(spec))
        except BackendError as err:
            listed = [b if isinstance(b, str) else b.name for b in backends]
            raise BackendError(f"in the backend list {listed}: {err}") from None
    infos = [b.info() for b in instances]
    labels = device_labels([i.name for i in infos])
    per_device = _options_per_device(options, labels, [i.name for i in infos])
    return [
        Device(label, backend, backend.parse_options(opts), info)
        for label, backend, info, opts in zip(labels, instances, infos, per_device, strict=True)
    ]


def _options_per_device(options: OptionsSpec, labels: list[str], names: list[str]) -> list[Any]:
    """Each device's options: a keyed mapping by label (or backend name), else shared."""
    if options is None or isinstance(options, BackendOptions):
        return [options] * len(labels)
    keys = set(labels) | set(names)
    if options and all(k in keys for k in options):
        for key, value in options.items():
            if not isinstance(value, Mapping | BackendOptions):
                raise BackendError(
                    f"options for {key!r} must be a mapping of option names to values, got {value!r}"
                )
        return [options.get(label, options.get(name)) for label, name in zip(labels, names, strict=True)]
    return [dict(options)] * len(labels)
