"""What a Session keys its compiled specializations by: the signature of a call (shapes and
dtypes per input, a sequence's element by element), what each declared input takes, and
the feeds in the forms the loader wants (shapes, flattened sequence elements).

Kept apart from ``session.py`` (the cache, the locks, specializing): these are pure
functions of the model's declarations and of one call's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from glow_core.errors import ModelLoadError
from glow_core.frontends.onnx.model import declared_type, element_name
from glow_core.graph.function import Module
from glow_core.types import Type

Feed = np.ndarray | list[np.ndarray] | None
"""One input or output of a call: a tensor, a sequence's elements, or None (an empty optional)."""

TensorKey = tuple[tuple[int, ...], str]
InputKey = TensorKey | tuple[str, tuple[TensorKey, ...]] | None
Signature = tuple[tuple[str, InputKey], ...]
"""Per input (in model order): its shape and dtype; for a sequence ("sequence", each element's
shape and dtype), so the length is part of it; None for an absent optional."""


@dataclass(frozen=True)
class InputInfo:
    """What one graph input takes, from the model's declaration (checked against each call)."""

    name: str
    dtype: np.dtype | None  # None: the model declares no element type
    rank: int | None  # None: the model declares no shape
    sequence: bool = False  # a sequence of tensors (dtype and rank are its elements')
    optional: bool = False  # None is accepted (an absent optional)
    dims: tuple[int | None, ...] = ()  # declared dims (None: symbolic); () with rank None

    def describe(self) -> str:
        what = "sequence of tensors" if self.sequence else "tensor"
        return f"an optional {what}" if self.optional else f"a {what}"

    def expects(self) -> str:
        """What to pass for this input, for error messages."""
        what = "a list of numpy arrays" if self.sequence else "a numpy array"
        return f"{what} or None" if self.optional else what


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN, so a NaN probe answer can match)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def same_feed(a: Feed, b: Feed) -> bool:
    """Whether two inputs are equal: tensors by value, sequences element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_array(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return same_array(a, b)
    return a is None and b is None


def _tensor_key(array: np.ndarray) -> TensorKey:
    return tuple(array.shape), array.dtype.str


def input_key(value: Feed) -> InputKey:
    """One input's part of a call's signature: shape and dtype (per element for a sequence)."""
    if value is None:
        return None
    if isinstance(value, list):
        return "sequence", tuple(_tensor_key(v) for v in value)
    return _tensor_key(value)


def _describe_key(key: InputKey) -> str:
    if key is None:
        return "None"
    if key[0] == "sequence":
        return "[" + ", ".join(_describe_key(k) for k in key[1]) + "]"  # type: ignore[arg-type]
    shape, dtype = key
    return f"{_dtype_name(dtype)}{list(shape)}"  # type: ignore[arg-type]


def _dtype_name(code: str) -> str:
    """A key's dtype in words; ml_dtypes kinds (float8...) have codes numpy cannot parse back."""
    try:
        return np.dtype(code).name
    except TypeError:
        return code


def describe_signature(signature: Signature) -> str:
    """A signature in words for error messages: ``x: float32[1, 3], xs: [int64[2]]``."""
    return ", ".join(f"{name}: {_describe_key(key)}" for name, key in signature)


def _shape_of(value: Feed) -> Any:
    """``input_shapes`` of one input for the loader: a shape, one per element, or None if absent."""
    if isinstance(value, list):
        return [v.shape for v in value]
    return None if value is None else value.shape


def shapes_of(feeds: Mapping[str, Feed]) -> dict[str, Any]:
    """The loader's ``input_shapes`` for one call's feeds."""
    return {name: _shape_of(value) for name, value in feeds.items()}


def flatten(feeds: Mapping[str, Feed]) -> dict[str, np.ndarray]:
    """The placeholders' values: a sequence's elements under ``name[i]``, absent optionals none."""
    flat: dict[str, np.ndarray] = {}
    for name, value in feeds.items():
        if isinstance(value, list):
            flat.update((element_name(name, i), v) for i, v in enumerate(value))
        elif value is not None:
            flat[name] = value
    return flat


def declared_key(module: Module, info: InputInfo, input_shapes: Mapping[str, Any]) -> InputKey:
    """The signature entry of an input of a specialization compiled without a call: read from
    its placeholders (one per element of a sequence; none for an absent optional)."""
    if info.name in input_shapes and input_shapes[info.name] is None:
        return None
    if not info.sequence:
        return _type_key(module.placeholders[info.name].type)
    names = [element_name(info.name, i) for i in range(len(input_shapes[info.name]))]
    return "sequence", tuple(_type_key(module.placeholders[n].type) for n in names)


def _type_key(type: Type) -> TensorKey:
    return type.shape, type.dtype.str


def input_info(value: onnx.ValueInfoProto) -> InputInfo:
    """What input ``value`` takes; kinds glow has no form for (a map...) are refused here."""
    declared = declared_type(value.type, f"input {value.name!r}")
    tensor = declared.tensor
    dtype = _declared_dtype(value.name, tensor.elem_type) if tensor.elem_type else None
    rank = len(tensor.shape.dim) if tensor.HasField("shape") else None
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
    return InputInfo(value.name, dtype, rank, declared.sequence, declared.optional, dims)


def _declared_dtype(name: str, elem_type: int) -> np.dtype:
    """The numpy dtype of an input's declared element type, or a clear refusal of a number
    that ONNX does not define (a corrupt or hand-edited model)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        raise ModelLoadError(
            f"input {name!r} declares element type {elem_type}, which ONNX does not define; "
            "fix the input's declaration in the model (onnx.TensorProto.DataType lists the types)"
        ) from None


def fully_declared(value: onnx.ValueInfoProto) -> bool:
    """Whether the model gives every dimension of ``value`` (nothing symbolic to wait for)."""
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)
