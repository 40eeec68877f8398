"""String tensors as numpy sees them: object arrays of ``str``, one form for every caller.

ONNX string tensors reach glow from callers (numpy ``str_`` arrays, lists, bytes) and from
ONNX attributes and test data; the host ops, the LabelEncoder table and a Session's input
checks all need them in one form, so the conversion lives here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto, helper

from glow_core.errors import InputError

STRING = TensorProto.STRING


def objects(values: Any, shape: Sequence[int]) -> np.ndarray:
    """An object array of ``shape`` holding ``values`` (a scalar, list or array) element by element.

    ``np.array(list_of_str)`` would make a fixed-width ``str_`` array (and a 0-d result of a
    ufunc is a bare scalar), so string results are always built through this.
    """
    out = np.empty(tuple(shape), dtype=object)
    if out.size:
        out[...] = np.asarray(values, dtype=object).reshape(out.shape) if np.ndim(values) else values
    return out


def as_strings(value: np.ndarray, what: str) -> np.ndarray:
    """``value`` as an object array of ``str``: str_ arrays converted, bytes decoded as UTF-8.

    Anything else (numbers, None) is refused, naming ``what``, since an op would otherwise
    fail half-way with a Python TypeError.
    """
    if value.dtype.kind == "U":
        return objects(value.tolist(), value.shape)
    if value.dtype.kind not in "OS":
        raise InputError(f"{what} must hold strings, got dtype {value.dtype}")
    flat = value.reshape(-1).tolist()
    if all(type(v) is str for v in flat):
        return value if value.dtype.kind == "O" else objects(flat, value.shape)
    decoded = []
    for v in flat:
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(
                    f"{what} holds bytes that are not UTF-8 ({err}); decode them first"
                ) from None
        if not isinstance(v, str):
            raise InputError(f"{what} must hold strings, got an element of type {type(v).__name__}")
        decoded.append(v)
    return objects(decoded, value.shape)


def onnx_elem(dtype: np.dtype) -> int:
    """The ONNX element type of arrays of ``dtype`` (object arrays hold strings)."""
    return STRING if dtype.kind == "O" else helper.np_dtype_to_tensor_dtype(dtype)
