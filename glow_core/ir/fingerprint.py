"""A lossless, deterministic serialization of an IRFunction, and its hash: what caches key by.

The text printer is for eyes: it shows floats to 6 significant digits, so two functions that
compute different things (``x * 1.5`` and ``x * 1.500001``) print alike. A cache keyed by
that text hands one function's object code to the other. This serialization writes every
fact exactly instead: floats by their bits (``float.hex``), ints, bools and strings tagged so
that ``1``, ``1.0`` and ``True`` differ, every field of every instruction and weight (read
from the dataclasses, so a field added later is covered without touching this file), the
operands by position, the memory plan, and, when the caller says its code depends on them,
constant values by a hash of their bytes.

Nothing is ordered by ``id()`` or ``hash()``, so the result is the same in every process.
A value this module cannot write exactly is an error, never a lossy ``repr``.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from glow_core.errors import VerifyError
from glow_core.ir.instructions import Instr, IRFunction, Value, WeightVar

FORMAT = "glow-ir-fingerprint/1"
"""Bumped whenever the encoding changes, so old keys can never match new ones."""

ConstantFilter = Callable[[WeightVar], bool]


def encode(value: Any) -> Any:
    """``value`` as JSON data that says exactly what it is.

    Strings, ints and None stay themselves; everything else is a ``[tag, payload]`` list, so
    no two different values encode alike (a tuple of strings cannot pass for a float).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: True is an int too
        return ["bool", value]
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return ["float", value.hex()]  # every bit: -0.0, nan and 1.500001 stay distinct
    if isinstance(value, np.ndarray):
        return ["array", str(value.dtype), list(value.shape), _digest(value)]
    if isinstance(value, np.generic):
        return ["numpy", str(value.dtype), encode(value.item())]
    if isinstance(value, enum.Enum):
        return ["enum", _qualified_name(type(value)), value.name]
    if isinstance(value, tuple | list):
        return [type(value).__name__, [encode(v) for v in value]]
    if isinstance(value, Mapping):
        return ["dict", [[encode(k), encode(v)] for k, v in value.items()]]  # order kept: it may matter
    if isinstance(value, frozenset | set):
        return ["set", sorted(json.dumps(encode(v), sort_keys=True) for v in value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [[f.name, encode(getattr(value, f.name))] for f in dataclasses.fields(value)]
        return ["dataclass", _qualified_name(type(value)), fields]
    raise TypeError(
        f"cannot serialize a {_qualified_name(type(value))} ({value!r:.80}) exactly; "
        "teach glow_core.ir.fingerprint.encode about it rather than keying by its repr"
    )


def serialize_ir(ir: IRFunction, constant_values: ConstantFilter | None = None) -> str:
    """Every fact of ``ir`` as canonical JSON text.

    ``constant_values`` selects the constants whose *values* the caller's code depends on
    (baked into the code rather than read from the constants region at run time); only
    their bytes are hashed in. Every other weight contributes its name, kind, type and
    whether it has a value.
    """
    refs: dict[int, list[Any]] = {}
    for index, weight in enumerate(ir.weights):
        refs[id(weight)] = ["weight", index]
    for index, instr in enumerate(ir.instrs):
        refs[id(instr)] = ["instr", index]
    weights = [_weight(w, constant_values) for w in ir.weights]
    instrs = [_instr(i, refs) for i in ir.instrs]
    document = [FORMAT, ir.name, weights, instrs, encode(ir.memory_plan)]
    return json.dumps(document, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def ir_fingerprint(
    ir: IRFunction,
    extra: Mapping[str, Any] | None = None,
    constant_values: ConstantFilter | None = None,
) -> str:
    """A SHA-256 (hex) of ``serialize_ir(ir, constant_values)`` and of ``extra``.

    ``extra`` holds what else the caller's result depends on: options, target, versions.
    """
    digest = hashlib.sha256(serialize_ir(ir, constant_values).encode())
    digest.update(b"\0")
    digest.update(json.dumps(encode(dict(sorted((extra or {}).items()))), separators=(",", ":")).encode())
    return digest.hexdigest()


def _weight(weight: WeightVar, constant_values: ConstantFilter | None) -> list[Any]:
    fields = []
    for f in dataclasses.fields(weight):
        if f.name == "value":
            continue
        fields.append([f.name, encode(getattr(weight, f.name))])
    has_value = weight.value is not None
    fields.append(["has_value", encode(has_value)])
    if has_value and constant_values is not None and constant_values(weight):
        stored = np.ascontiguousarray(weight.value, dtype=weight.type.dtype)
        fields.append(["value", encode(stored)])
    return fields


def _instr(instr: Instr, refs: dict[int, list[Any]]) -> list[Any]:
    fields: list[Any] = [["class", _qualified_name(type(instr))]]
    for f in dataclasses.fields(instr):
        value = getattr(instr, f.name)
        encoded: Any
        if f.name == "operands":
            encoded = [[_ref(v, instr, refs), role.value] for v, role in value]
        elif f.name == "spec":
            encoded = None if value is None else value.name  # the declaration is named by its kind
        else:
            encoded = encode(value)
        fields.append([f.name, encoded])
    return fields


def _ref(value: Value, user: Instr, refs: dict[int, list[Any]]) -> list[Any]:
    try:
        return refs[id(value)]
    except KeyError:
        raise VerifyError(
            f"instruction {user.kind} {user.name!r} uses %{value.name}, which is not a weight or "
            "instruction of its function"
        ) from None


def _digest(array: np.ndarray) -> str:
    if array.dtype.hasobject:
        raise TypeError("cannot serialize an array of Python objects exactly")
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
