"""The ONNX ops glow runs on the host, in numpy: string tensors and encoded images.

glow's element kinds and IR are numeric (every tensor has a fixed-size element a backend
can hold in its arena), so a string tensor cannot reach compiled code, and decoding an
image (``ImageDecoder``) is a library call whose output shape depends on the data. These
ops run per call on the host instead (``glow_core.runtime.host`` splits a model between
the host and a compiled device part). Each op is declared here once: when a node runs on
the host (``claims``), what its attributes mean (``prepare``, run once per model so a bad
attribute fails when the model is opened) and what it computes (the kernel ``prepare``
returns, with the ONNX element type of each output).

String tensors are numpy object arrays of ``str`` on the way in and out; ``as_strings``
accepts bytes (decoded as UTF-8) and numpy ``str_`` arrays too, the forms callers and the
ONNX test data use.
"""

from __future__ import annotations

import io
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from glow_core.errors import InputError, ShapeError, UnsupportedOpError

STRING = TensorProto.STRING
ML_DOMAIN = "ai.onnx.ml"
IMAGES_EXTRA = "glow-core[images]"
"""The optional dependency set that brings the image library ImageDecoder needs."""


# ---- values -------------------------------------------------------------------------------


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


# ---- declarations -------------------------------------------------------------------------


@dataclass(frozen=True)
class HostNode:
    """One ONNX node as the host sees it: decoded attributes and which inputs hold strings."""

    proto: onnx.NodeProto
    attrs: Mapping[str, Any]
    string_inputs: tuple[bool, ...]
    """Per position of ``proto.input``: whether that tensor is a string tensor."""

    @property
    def name(self) -> str:
        return self.proto.name or (self.proto.output[0] if self.proto.output else self.proto.op_type)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def refuse(self, message: str) -> UnsupportedOpError:
        """An error (to raise) that names this node and its op type."""
        return UnsupportedOpError(f"ONNX node {self.name!r} ({self.proto.op_type}): {message}")

    def string_input(self, index: int) -> bool:
        return index < len(self.string_inputs) and self.string_inputs[index]


Kernel = Callable[[list[np.ndarray | None]], list[np.ndarray]]


@dataclass(frozen=True)
class Prepared:
    """A host node ready to run: the kernel and the ONNX element type of each output."""

    run: Kernel
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class HostOp:
    """A table entry: the op, when a node of it runs on the host, and how it is prepared."""

    op_type: str
    domain: str
    claims: Callable[[HostNode], bool]
    prepare: Callable[[HostNode], Prepared]


HOST_OPS: dict[tuple[str, str], HostOp] = {}
"""(domain, op type) -> entry; the default domain is ""."""


def _always(node: HostNode) -> bool:
    return True


def host_op(
    op_type: str, *, domain: str = "", claims: Callable[[HostNode], bool] = _always
) -> Callable[[Callable[[HostNode], Prepared]], Callable[[HostNode], Prepared]]:
    """Register ``prepare`` as the host implementation of ``op_type`` (refusing a second one)."""

    def register(prepare: Callable[[HostNode], Prepared]) -> Callable[[HostNode], Prepared]:
        if (domain, op_type) in HOST_OPS:
            raise TypeError(f"host op {op_type!r} of domain {domain!r} is declared twice")
        HOST_OPS[(domain, op_type)] = HostOp(op_type, domain, claims, prepare)
        return prepare

    return register


def host_op_for(node: onnx.NodeProto) -> HostOp | None:
    """The entry for ``node``'s op type, whatever runs it (``claims`` decides)."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return HOST_OPS.get((domain, node.op_type))


def always_host(node: onnx.NodeProto) -> bool:
    """Whether ``node`` runs on the host whatever its inputs are (a string or image op)."""
    entry = host_op_for(node)
    return entry is not None and entry.claims is _always


def host_op_names() -> list[str]:
    """The op types the host runs, for messages and docs."""
    return sorted({op for _, op in HOST_OPS})


def decode_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Attributes as Python values: strings decoded, tensors as numpy arrays (strings as str)."""
    attrs: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            continue
        value = helper.get_attribute_value(attr)
        if attr.type == AttributeProto.TENSOR:
            value = numpy_helper.to_array(value)
        elif attr.type == AttributeProto.STRING:
            value = value.decode("utf-8")
        elif attr.type == AttributeProto.STRINGS:
            value = [v.decode("utf-8") for v in value]
        elif attr.type in (AttributeProto.INTS, AttributeProto.FLOATS):
            value = list(value)
        attrs[attr.name] = value
    return attrs


def _elementwise(node: HostNode, fn: Callable[[Any, Any], Any], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``fn`` on every pair of elements of ``x`` and ``y`` broadcast numpy-style (an object array)."""
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ShapeError(
            f"ONNX node {node.name!r} ({node.proto.op_type}): shapes {x.shape} and {y.shape} do not broadcast"
        ) from None
    return objects(np.frompyfunc(fn, 2, 1)(x, y), shape)


def _text(node: HostNode, value: np.ndarray | None, index: int) -> np.ndarray:
    if value is None:
        raise node.refuse(f"required input {index} is missing")
    return as_strings(np.asarray(value), f"input {index} of ONNX node {node.name!r} ({node.proto.op_type})")


# ---- string ops ---------------------------------------------------------------------------


@host_op("StringConcat")
def _string_concat(node: HostNode) -> Prepared:
    """x + y element by element, broadcasting."""

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, y = _text(node, inputs[0], 0), _text(node, inputs[1], 1)
        return [_elementwise(node, operator.add, x, y)]

    return Prepared(run, (STRING,))


def _any_string_input(node: HostNode) -> bool:
    return any(node.string_inputs)


@host_op("Equal", claims=_any_string_input)
def _equal_strings(node: HostNode) -> Prepared:
    """Equal on string tensors (numeric Equal is compiled): bool, broadcasting."""
    if not all(node.string_input(i) for i in range(2)):
        raise node.refuse("compares a string tensor with a numeric one; both inputs must be strings")

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x, y = _text(node, inputs[0], 0), _text(node, inputs[1], 1)
        return [_elementwise(node, operator.eq, x, y).astype(bool)]

    return Prepared(run, (TensorProto.BOOL,))


@host_op("StringSplit")
def _string_split(node: HostNode) -> Prepared:
    """Each string split as Python's str.split does (whitespace runs when no delimiter), padded.

    The substrings get one more axis, as long as the longest split, padded with ""; the
    second output counts each element's substrings.
    """
    delimiter = node.attr("delimiter", "") or None
    maxsplit = int(node.attr("maxsplit", -1))
    if maxsplit < 0:
        maxsplit = -1

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = _text(node, inputs[0], 0)
        parts = [s.split(delimiter, maxsplit) for s in x.reshape(-1).tolist()]
        counts = np.asarray([len(p) for p in parts], np.int64).reshape(x.shape)
        width = int(counts.max(initial=0))
        padded = [p + [""] * (width - len(p)) for p in parts]
        return [objects(padded, (*x.shape, width)), counts]

    return Prepared(run, (STRING, TensorProto.INT64))


_CASE_CHANGES: dict[str, Callable[[str], str]] = {
    "NONE": lambda s: s,
    "LOWER": str.lower,
    "UPPER": str.upper,
}


@host_op("StringNormalizer")
def _string_normalizer(node: HostNode) -> Prepared:
    """Drop the stop words, then change case; [C] or [1, C] in, one axis shorter or longer out.

    Stop words are whole elements (the ONNX definition). A case-insensitive match compares
    ``str.casefold`` forms, Unicode's caseless matching; case changes are Python's
    locale-independent Unicode mappings, so the ``locale`` attribute is not consulted.
    """
    action = str(node.attr("case_change_action", "NONE")).upper()
    if action not in _CASE_CHANGES:
        raise node.refuse(f"case_change_action {action!r} is not one of {sorted(_CASE_CHANGES)}")
    change = _CASE_CHANGES[action]
    sensitive = bool(node.attr("is_case_sensitive", 0))
    key: Callable[[str], str] = (lambda s: s) if sensitive else str.casefold
    stops = {key(w) for w in node.attr("stopwords", [])}

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = _text(node, inputs[0], 0)
        if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
            raise InputError(
                f"ONNX node {node.name!r} (StringNormalizer) takes a [C] or [1, C] tensor, got {x.shape}"
            )
        kept = [change(s) for s in x.reshape(-1).tolist() if key(s) not in stops]
        if not kept and x.size:
            kept = [""]  # everything dropped: one empty string, as the ONNX definition says
        shape = (len(kept),) if x.ndim == 1 else (1, len(kept))
        return [objects(kept, shape)]

    return Prepared(run, (STRING,))


_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
"""RE2's ASCII classes ``[[:name:]]`` as the ranges Python's ``re`` knows."""

_RE2_ONLY_ESCAPES = "pPQEC"
"""``\\p{Greek}``, ``\\pN``, ``\\Q...\\E``, ``\\C``: RE2 escapes Python's ``re`` lacks."""


def re2_to_python(pattern: str) -> str:
    """An RE2 pattern as a Python ``re`` pattern with the same meaning, or ValueError.

    Python's syntax is nearly a superset of RE2's; the differences that would silently
    match otherwise are translated (``\\z``, ``[[:alpha:]]`` classes) or refused (``\\p``
    Unicode classes, ``\\Q...\\E``, ``\\C``, the ungreedy flag ``U``).
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            escape = pattern[i : i + 2]
            if escape[1] in _RE2_ONLY_ESCAPES:
                raise ValueError(f"{escape!r} is RE2 syntax that Python's re lacks")
            out.append("\\Z" if escape == "\\z" and not in_class else escape)
            i += 2
            continue
        if in_class and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end > 0 else ""
            if name not in _POSIX_CLASSES:
                raise ValueError(f"unknown or negated character class {pattern[i : end + 2]!r}")
            out.append(_POSIX_CLASSES[name])
            i = end + 2
            continue
        if not in_class and pattern.startswith("(?", i):
            flags = re.match(r"\(\?([a-zA-Z-]*)", pattern[i:])
            if flags and "U" in flags.group(1):
                raise ValueError("the ungreedy flag U is RE2 syntax that Python's re lacks")
        out.append(c)
        if c == "[" and not in_class:
            in_class = True
            # A ']' right after '[' or '[^' is a literal, not the end of the class.
            for lead in ("^", "]"):
                if pattern.startswith(lead, i + 1):
                    out.append(lead)
                    i += 1
        elif c == "]" and in_class:
            in_class = False
        i += 1
    return "".join(out)


@host_op("RegexFullMatch")
def _regex_full_match(node: HostNode) -> Prepared:
    """Whether each string matches the RE2 ``pattern`` as a whole (bool, same shape).

    Matched with Python's ``re`` after ``re2_to_python``, with ASCII classes (``\\w``,
    ``\\d``, ``\\s``, ``\\b``) as RE2 has them.
    """
    pattern = node.attr("pattern")
    if pattern is None:
        raise node.refuse("required attribute 'pattern' is missing")
    try:
        regex = re.compile(re2_to_python(pattern), re.ASCII)
    except (ValueError, re.error) as err:
        raise node.refuse(f"pattern {pattern!r} cannot be used: {err}") from None

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = _text(node, inputs[0], 0)
        found = [regex.fullmatch(s) is not None for s in x.reshape(-1).tolist()]
        return [np.asarray(found, dtype=bool).reshape(x.shape)]

    return Prepared(run, (TensorProto.BOOL,))


# ---- LabelEncoder (ai.onnx.ml) ------------------------------------------------------------


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


def _string_label_encoder(node: HostNode) -> bool:
    """String keys or values run on the host; numeric-only ones are compiled (ops_ml.py)."""
    if node.string_input(0) or "classes_strings" in node.attrs:
        return True
    for name in ("keys_strings", "values_strings"):
        if name in node.attrs:
            return True
    return any(
        np.asarray(node.attrs[name]).dtype.kind in "OSU"
        for name in ("keys_tensor", "values_tensor")
        if name in node.attrs
    )


@host_op("LabelEncoder", domain=ML_DOMAIN, claims=_string_label_encoder)
def _label_encoder(node: HostNode) -> Prepared:
    """Each element looked up in the key -> value table (the default when absent)."""
    mapping = label_mapping(node.attrs, node.string_input(0), node.refuse)
    if mapping.string_keys != node.string_input(0):
        kind = "strings" if mapping.string_keys else "numbers"
        raise node.refuse(f"its keys are {kind} but its input is not; the two must have one type")
    table = dict(zip(mapping.keys.tolist(), mapping.values.tolist(), strict=True))
    nan_keys = [k for k in table if isinstance(k, float) and math.isnan(k)]
    default = mapping.default.item()
    on_nan = table[nan_keys[0]] if nan_keys else default
    dtype = mapping.values.dtype

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        x = inputs[0]
        if x is None:
            raise node.refuse("required input 0 is missing")
        if mapping.string_keys:
            x = _text(node, x, 0)
        found = [table.get(v, default) if v == v else on_nan for v in np.asarray(x).reshape(-1).tolist()]
        if dtype.kind == "O":
            return [objects(found, x.shape)]
        return [np.asarray(found, dtype=dtype).reshape(x.shape)]

    return Prepared(run, (onnx_elem(dtype),))


# ---- ImageDecoder -------------------------------------------------------------------------

_PIXEL_FORMATS = {"RGB": ("RGB", 3), "BGR": ("RGB", 3), "Grayscale": ("L", 1)}


def _pillow() -> Any:
    """The PIL.Image module, or a refusal that names the extra to install."""
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedOpError(
            "ImageDecoder needs the Pillow image library, an optional dependency of glow: "
            f"pip install '{IMAGES_EXTRA}'"
        ) from None
    return Image


@host_op("ImageDecoder")
def _image_decoder(node: HostNode) -> Prepared:
    """An encoded image (uint8 bytes of BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP) as [H, W, C].

    Decoded by Pillow, whose JPEG decoder is libjpeg-turbo with the "fancy" chroma upsampling
    ONNX specifies. Data that cannot be decoded gives an empty [0, 0, C] image, as the ONNX
    definition says.
    """
    pixel_format = node.attr("pixel_format", "RGB")
    if pixel_format not in _PIXEL_FORMATS:
        raise node.refuse(f"pixel_format {pixel_format!r} is not one of {sorted(_PIXEL_FORMATS)}")
    mode, channels = _PIXEL_FORMATS[pixel_format]
    image_module = _pillow()

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        data = inputs[0]
        if data is None:
            raise node.refuse("required input 0 is missing")
        if data.dtype != np.uint8:
            raise InputError(f"ONNX node {node.name!r} (ImageDecoder) takes uint8 bytes, got {data.dtype}")
        try:
            with image_module.open(io.BytesIO(data.tobytes())) as image:
                pixels = np.asarray(image.convert(mode), dtype=np.uint8)
        except (OSError, ValueError, SyntaxError, image_module.DecompressionBombError):
            return [np.zeros((0, 0, channels), np.uint8)]
        pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
        if pixel_format == "BGR":
            pixels = pixels[:, :, ::-1]
        return [np.ascontiguousarray(pixels)]

    return Prepared(run, (TensorProto.UINT8,))


__all__ = [
    "HOST_OPS",
    "IMAGES_EXTRA",
    "HostNode",
    "HostOp",
    "LabelMapping",
    "Prepared",
    "always_host",
    "as_strings",
    "decode_attributes",
    "host_op",
    "host_op_for",
    "host_op_names",
    "label_mapping",
    "objects",
    "re2_to_python",
]
