"""A LabelEncoder's key -> value table, read from its attributes (``ai.onnx.ml``).

Read in two places that must agree: the importer compiles numeric-only encoders
(``ops_ml.py``), and the host runs encoders with string keys or values
(``glow_core.runtime.host_ops.label_encoder``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.frontends.onnx.string_values import as_strings, objects


@dataclass(frozen=True)
class LabelMapping:
    """A LabelEncoder's table, read from its attributes: unique keys, their values, the default.

    Keys are an object array of str or a numeric array; values and ``default`` (0-d) have
    the output's dtype (object for strings). A repeated key keeps its last value, and NaN
    keys collapse into one that matches every NaN input, as the ONNX definition says.
    """

    keys: np.ndarray
    values: np.ndarray
    default: np.ndarray

    @property
    def string_keys(self) -> bool:
        return self.keys.dtype.kind == "O"

    @property
    def string_values(self) -> bool:
        return self.values.dtype.kind == "O"


_DEFAULTS = {"string": "_Unused", "int": -1, "float": -0.0}


def _family(dtype: np.dtype) -> str:
    return "string" if dtype.kind == "O" else "float" if dtype.kind == "f" else "int"


def label_mapping(
    attrs: Mapping[str, Any], input_is_string: bool, refuse: Callable[[str], Exception]
) -> LabelMapping:
    """The table of a LabelEncoder node from its attributes (opset 1's ``classes_strings`` too).

    ``input_is_string`` picks the direction of an opset-1 encoder (strings to their index,
    or indices to strings). ``refuse(message)`` makes the error raised for bad attributes.
    """
    if "classes_strings" in attrs:
        classes = objects(list(attrs["classes_strings"]), (len(attrs["classes_strings"]),))
        indices = np.arange(len(classes), dtype=np.int64)
        if input_is_string:
            keys, values = classes, indices
            default = np.asarray(attrs.get("default_int64", -1), np.int64)
        else:
            keys, values = indices, classes
            default = objects(attrs.get("default_string", _DEFAULTS["string"]), ())
        return _unique(keys, values, default)
    keys = _one_of(attrs, "keys", refuse)
    values = _one_of(attrs, "values", refuse)
    if len(keys) != len(values):
        raise refuse(f"{len(keys)} keys but {len(values)} values; they must pair up")
    family = _family(values.dtype)
    default_value: Any = _DEFAULTS[family]
    if "values_tensor" not in attrs:
        named = {"string": "default_string", "int": "default_int64", "float": "default_float"}[family]
        default_value = attrs.get(named, default_value)
    elif "default_tensor" in attrs:
        given = np.asarray(attrs["default_tensor"]).reshape(-1)
        if given.size != 1:
            raise refuse(f"default_tensor must hold one value, got {given.size}")
        default_value = as_strings(given, "default_tensor")[0] if family == "string" else given[0]
    default = objects(default_value, ()) if family == "string" else np.asarray(default_value, values.dtype)
    return _unique(keys, values, default)


def _one_of(attrs: Mapping[str, Any], role: str, refuse: Callable[[str], Exception]) -> np.ndarray:
    """The one ``keys_*`` (or ``values_*``) attribute given, as a 1-D array of its type."""
    forms = {
        f"{role}_strings": None,
        f"{role}_int64s": np.int64,
        f"{role}_floats": np.float32,
        f"{role}_tensor": "tensor",
    }
    given = [name for name in forms if name in attrs]
    if len(given) != 1:
        raise refuse(f"exactly one of {', '.join(forms)} must be given, got {given or 'none'}")
    name = given[0]
    value = attrs[name]
    if forms[name] is None:
        return objects(list(value), (len(value),))
    array = np.asarray(value).reshape(-1)
    if forms[name] == "tensor":
        return as_strings(array, name) if array.dtype.kind in "OSU" else array
    return array.astype(forms[name])


def _unique(keys: np.ndarray, values: np.ndarray, default: np.ndarray) -> LabelMapping:
    """Drop all but the last of each repeated key (NaN keys count as one)."""
    last: dict[Any, int] = {}
    for i, k in enumerate(keys.tolist()):
        last["nan" if isinstance(k, float) and math.isnan(k) else ("k", k)] = i
    order = sorted(last.values())
    return LabelMapping(keys[order], values[order], default)
