"""The words of the graph and IR text forms: names, types, attributes and tensor data.

Both printers write these, both parsers read them, so one fact (how a float is written)
sits in one place. Everything is written exactly: a float attribute by ``repr`` (the
shortest text that reads back to the same double, ``1.0`` never ``1``), a quantization
scale the same way, tensor data as a list of such literals when that reads back to the
same bytes and is short, otherwise as base64 of the little-endian bytes. Nothing is
rounded for the reader's eye: the text is what tests, caches and tools compare.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.errors import TextParseError
from glow_core.types import ElemKind, Type

INLINE_ELEMENTS = 16
"""Tensors with at most this many elements are written as a literal list, others as base64."""

_BARE_NAME = re.compile(r"[A-Za-z0-9_.:/+\-]+")

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r]+)
    |(?P<comment>//[^\n]*)
    |(?P<type>[a-z][a-z0-9]*<[^<>\n]*>)
    |(?P<value>%(?:"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[A-Za-z0-9_.:/+\-]+))
    |(?P<string>"[^"\\\n]*(?:\\.[^"\\\n]*)*")
    |(?P<role>@[a-z]+)
    |(?P<number>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf\b|nan\b))
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<punct>[=,:{}\[\]()])
    """,
    re.X,
)


# ---- writing ------------------------------------------------------------------------------


def format_name(name: str) -> str:
    """A name as written after ``%``: bare when it is only name characters, else JSON-quoted."""
    return name if _BARE_NAME.fullmatch(name) else json.dumps(name)


def format_label(name: str) -> str:
    """A function's name: bare when it is a plain word, else JSON-quoted."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else json.dumps(name)


def format_value_ref(name: str) -> str:
    return "%" + format_name(name)


def format_attr(value: Any) -> str:
    """An attribute value, exactly and typed: ``3``, ``3.0``, ``true``, ``"eq"``, ``(1,2)``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        inner = ",".join(format_attr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    raise TypeError(
        f"cannot write a {type(value).__name__} attribute ({value!r:.60}) exactly; "
        "attributes are None, bool, int, float, str or tuples of these"
    )


def format_attrs(attrs: dict[str, Any]) -> str:
    """`` {k=v, ...}`` (empty when there are none)."""
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in attrs.items()) + "}"


def format_data(value: np.ndarray, t: Type) -> str:
    """A tensor's elements, exactly: ``[1.5, -0.0]`` when short and the literals read back
    to the same bytes, else ``base64 "..."`` of its little-endian bytes."""
    stored = np.ascontiguousarray(value)
    if stored.dtype != t.dtype or stored.size != t.size:
        raise TypeError(f"a constant of type {t} holds {stored.dtype}{list(stored.shape)}")
    if stored.size <= INLINE_ELEMENTS:
        literals = [_element_literal(x, t.elem) for x in stored.reshape(-1).tolist()]
        text = "[" + ", ".join(literals) + "]"
        if parse_data_literals(literals, t).tobytes() == stored.tobytes():
            return text
    return 'base64 "' + base64.b64encode(stored.tobytes()).decode("ascii") + '"'


def _element_literal(x: Any, elem: ElemKind) -> str:
    if elem is ElemKind.bool:
        return "true" if x else "false"
    if isinstance(x, float) or elem.is_float or np.dtype(elem.dtype).kind not in "iub":
        return repr(float(x))
    return str(int(x))


# ---- reading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def tokenize(line: str, where: str) -> list[Token]:
    """The tokens of one line (comments and spaces dropped); ``where`` names it in errors."""
    tokens: list[Token] = []
    position = 0
    while position < len(line):
        match = _TOKEN.match(line, position)
        if match is None:
            raise TextParseError(f"{where}: cannot read {line[position : position + 20]!r}")
        kind = match.lastgroup or ""
        if kind not in ("space", "comment"):
            tokens.append(Token(kind, match.group()))
        position = match.end()
    return tokens


class Cursor:
    """Reads one line's tokens in order, raising TextParseError that names the line."""

    def __init__(self, line: str, where: str):
        self.where = where
        self.tokens = tokenize(line, where)
        self.position = 0

    def peek(self) -> Token | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def fail(self, expected: str) -> TextParseError:
        found = self.peek()
        what = "the end of the line" if found is None else repr(found.text)
        return TextParseError(f"{self.where}: expected {expected}, found {what}")

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.peek()
        if token is None or token.kind != kind or (text is not None and token.text != text):
            return None
        self.position += 1
        return token

    def expect(self, kind: str, text: str | None = None) -> Token:
        token = self.accept(kind, text)
        if token is None:
            raise self.fail(repr(text) if text else f"a {kind}")
        return token

    def done(self) -> None:
        if self.peek() is not None:
            raise self.fail("the end of the line")

    def name(self) -> str:
        """A bare or quoted name (a function's, the data section's)."""
        token = self.accept("string")
        if token is not None:
            return json.loads(token.text)
        token = self.peek()
        if token is not None and token.kind in ("word", "number"):
            self.position += 1
            return token.text
        raise self.fail("a name")

    def value_ref(self) -> str:
        """The name after a ``%``."""
        text = self.expect("value").text[1:]
        return json.loads(text) if text.startswith('"') else text

    def type(self) -> Type:
        return parse_type(self.expect("type").text, self.where)

    def attrs(self) -> dict[str, Any]:
        """``{k=v, ...}`` when present, else nothing."""
        attrs: dict[str, Any] = {}
        if not self.accept("punct", "{"):
            return attrs
        while not self.accept("punct", "}"):
            if attrs:
                self.expect("punct", ",")
            key = self.expect("word").text
            self.expect("punct", "=")
            attrs[key] = self.attr()
        return attrs

    def attr(self) -> Any:
        token = self.peek()
        if token is None:
            raise self.fail("an attribute value")
        if token.kind == "punct" and token.text == "(":
            self.position += 1
            items: list[Any] = []
            while not self.accept("punct", ")"):
                items.append(self.attr())
                if not self.accept("punct", ","):
                    self.expect("punct", ")")
                    break
            return tuple(items)
        self.position += 1
        if token.kind == "string":
            return json.loads(token.text)
        if token.kind == "number":
            return parse_number(token.text)
        words = {"true": True, "false": False, "none": None}
        if token.kind == "word" and token.text in words:
            return words[token.text]
        self.position -= 1
        raise self.fail("an attribute value")

    def data(self, t: Type) -> np.ndarray:
        """``[literals]`` or ``base64 "..."`` as an array of type ``t``."""
        if self.accept("word", "base64"):
            raw = base64.b64decode(json.loads(self.expect("string").text), validate=True)
            if len(raw) != t.nbytes:
                raise TextParseError(f"{self.where}: {len(raw)} bytes of data for {t} ({t.nbytes} bytes)")
            return np.frombuffer(raw, dtype=t.dtype).reshape(t.shape).copy()
        self.expect("punct", "[")
        literals: list[str] = []
        while not self.accept("punct", "]"):
            if literals:
                self.expect("punct", ",")
            token = self.peek()
            if token is None or token.kind not in ("number", "word"):
                raise self.fail("a number")
            literals.append(token.text)
            self.position += 1
        if len(literals) != t.size:
            raise TextParseError(f"{self.where}: {len(literals)} values for {t} ({t.size} elements)")
        return parse_data_literals(literals, t)


def parse_number(text: str) -> int | float:
    """An int when written as one (``3``), else a float (``3.0``, ``1e-05``, ``-inf``, ``nan``)."""
    if re.fullmatch(r"[-+]?\d+", text):
        return int(text)
    return float(text)


def parse_data_literals(literals: list[str], t: Type) -> np.ndarray:
    """Element literals (``1.5``, ``-3``, ``true``) as an array of type ``t``."""
    if t.elem is ElemKind.bool:
        values: list[Any] = [text == "true" for text in literals]
    elif t.elem.is_float or np.dtype(t.dtype).kind not in "iub":
        values = [float(text) for text in literals]
    else:
        values = [int(text) for text in literals]
    return np.array(values, dtype=t.dtype).reshape(t.shape)


def parse_type(text: str, where: str = "type") -> Type:
    """``f32<4x3>``, ``f32<>`` (a scalar), ``i8<4, scale=0.5, offset=-3>``."""
    match = re.fullmatch(r"([a-z][a-z0-9]*)<([^<>]*)>", text.strip())
    if match is None:
        raise TextParseError(f"{where}: {text!r} is not a type such as f32<4x3>")
    kind, inside = match.groups()
    dims, *quant = [part.strip() for part in inside.split(",")]
    try:
        elem = ElemKind.parse(kind)
        shape = tuple(int(d) for d in dims.split("x")) if dims else ()
        params = dict(part.split("=", 1) for part in quant)
        scale = float(params.pop("scale")) if "scale" in params else None
        offset = int(params.pop("offset")) if "offset" in params else None
    except ValueError as err:
        raise TextParseError(f"{where}: bad type {text!r}: {err}") from None
    if params:
        raise TextParseError(f"{where}: unknown type parameter(s) {sorted(params)} in {text!r}")
    if scale is not None and not math.isfinite(scale):
        raise TextParseError(f"{where}: the scale of {text!r} must be finite")
    return Type(shape, elem, scale, offset)
