"""Reading the arguments the ``glow`` commands share: a model (a path or ``zoo:NAME``),
``--input``, ``--option``, ``--backend`` lists and ``--partition``.

One place for every command (run, dump, report, bench, profile, bundle): each parses these
the same way and says the same thing about a malformed one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from glow_core.errors import InputError, ModelLoadError

ZOO_PREFIX = "zoo:"


def load_onnx_proto(spec: str) -> onnx.ModelProto:
    """An ONNX model from a path, or from the model zoo as ``zoo:NAME``."""
    if spec.startswith(ZOO_PREFIX):
        from glow_core.model_zoo import MODELS

        name = spec[len(ZOO_PREFIX) :]
        if name not in MODELS:
            raise ModelLoadError(f"no zoo model {name!r}; available: {', '.join(MODELS)}")
        return MODELS[name]()
    path = Path(spec)
    if not path.is_file():
        raise ModelLoadError(f"model file {spec!r} does not exist (give an .onnx path or zoo:NAME)")
    try:
        return onnx.load(str(path))
    except Exception as err:
        raise ModelLoadError(f"cannot parse ONNX file {spec!r}: {err}; re-export the model") from None


def parse_inputs(pairs: Sequence[str]) -> dict[str, np.ndarray]:
    inputs = {}
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep:
            raise InputError(f"--input {pair!r}: expected NAME=FILE.npy")
        try:
            inputs[name] = np.load(file)
        except OSError as err:
            raise InputError(f"--input {name}: cannot read {file!r}: {err}") from None
    return inputs


def parse_options(pairs: Sequence[str]) -> dict[str, object]:
    """``KEY=VALUE`` backend options; values read as JSON when they parse (3, true), else text."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(text)
        except json.JSONDecodeError:
            options[key] = text
    return options


def backend_arg(text: str | None) -> str | list[str] | None:
    """``--backend``: one name, or a comma-separated list in preference order (``acme,cpu``)."""
    if text is None or "," not in text:
        return text
    from glow_core.partition import split_backend_list

    return split_backend_list(text)


def device_options(options: dict[str, object], backends: list[str]) -> dict[str, object]:
    """For a backend list: ``NAME.KEY=VALUE`` options go to the devices named NAME (a backend
    name or a label such as cpu:1); plain ``KEY=VALUE`` to every device."""
    from glow_core.partition.devices import device_labels

    labels = device_labels(backends)
    shared = {k: v for k, v in options.items() if "." not in k}
    keyed: dict[str, object] = {label: dict(shared) for label in labels}
    for key, value in options.items():
        if "." not in key:
            continue
        target, _, option = key.partition(".")
        matching = [lb for lb, name in zip(labels, backends, strict=True) if target in (lb, name)]
        if not matching:
            raise InputError(f"--option {key}: {target!r} is none of the devices {labels}")
        for label in matching:
            keyed[label][option] = value  # type: ignore[index]
    return keyed


def parse_partition(pairs: Sequence[str]) -> dict[str, str | int] | None:
    """``--partition PATTERN=DEVICE`` pairs (a device label, backend name or list index)."""
    if not pairs:
        return None
    chosen: dict[str, str | int] = {}
    for pair in pairs:
        pattern, sep, device = pair.rpartition("=")
        if not sep or not pattern or not device:
            raise InputError(f"--partition {pair!r}: expected NODE_OR_PATTERN=DEVICE")
        chosen[pattern] = int(device) if device.isdigit() else device
    return chosen
