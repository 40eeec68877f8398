"""IR text back into an IRFunction: the inverse of ``ir_to_text``.

Generic over instruction kinds: ``alloc``, ``dealloc`` and ``view`` have their own words;
every other line is ``Kind "name" @role %value, ... {attrs}``, whose declaration (when the
kind is a declared primitive or node) fills the attributes the printer left out and is
attached as the instruction's ``spec``. A ``%name`` reads the latest value defined under
that name (weights first, then allocs and views in order). The memory plan is not in the
text: run the ``plan-memory`` step on the result.
"""

from __future__ import annotations

import json

from glow_core.errors import ShapeError, TextParseError
from glow_core.ir.instructions import (
    AllocActivation,
    Instr,
    IRFunction,
    Role,
    Value,
    WeightKind,
    WeightVar,
    make_alloc,
    make_dealloc,
    make_view,
)
from glow_core.spec import NODES, PRIMITIVES
from glow_core.text_syntax import Cursor

_SECTIONS = ("declare", "code", "data")


def parse_ir(text: str) -> IRFunction:
    """The IRFunction ``text`` describes; TextParseError names the line."""
    reader = _IRReader()
    section = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cursor = Cursor(line, f"line {number}")
        word = cursor.peek()
        if word is not None and word.kind == "word" and word.text in ("function", *_SECTIONS):
            cursor.position += 1
            if word.text == "function":
                reader.ir.name = cursor.name()
            else:
                section = word.text
                if section != "data":
                    cursor.expect("punct", "{")
            cursor.done()
            continue
        if cursor.accept("punct", "}"):
            cursor.done()
            section = None
            continue
        if section is None:
            raise cursor.fail("'function', 'declare {', 'code {' or 'data'")
        try:
            getattr(reader, section)(cursor)
        except ShapeError as err:
            raise TextParseError(f"{cursor.where}: {err}") from None
        cursor.done()
    return reader.ir


class _IRReader:
    def __init__(self) -> None:
        self.ir = IRFunction("main", [], [])
        self.values: dict[str, Value] = {}

    def value(self, cursor: Cursor) -> Value:
        name = cursor.value_ref()
        if name not in self.values:
            raise TextParseError(f"{cursor.where}: %{name} is read before it is defined")
        return self.values[name]

    def declare(self, cursor: Cursor) -> None:
        name = cursor.value_ref()
        cursor.expect("punct", "=")
        kind = cursor.expect("word").text
        try:
            region = WeightKind(kind)
        except ValueError:
            raise TextParseError(f"{cursor.where}: {kind!r} is not one of input, output, constant") from None
        cursor.expect("punct", ":")
        weight = WeightVar(name, cursor.type(), region)
        self.ir.weights.append(weight)
        self.values[name] = weight

    def code(self, cursor: Cursor) -> None:
        cursor.accept("number")  # the printed index, for readers
        if cursor.accept("word", "dealloc"):
            alloc = self.value(cursor)
            if not isinstance(alloc, AllocActivation):
                raise TextParseError(f"{cursor.where}: dealloc of %{alloc.name}, which is not an alloc")
            dealloc = make_dealloc(alloc)
            if cursor.peek() is not None:  # written only when it is not the usual name
                dealloc.name = cursor.name()
            self.ir.instrs.append(dealloc)
            return
        token = cursor.peek()
        if token is not None and token.kind == "value":
            self.define(cursor)
            return
        kind = cursor.expect("word").text
        name = json.loads(cursor.expect("string").text)
        operands: list[tuple[Value, Role]] = []
        while (token := cursor.accept("role")) is not None:
            try:
                role = Role(token.text)
            except ValueError:
                raise TextParseError(f"{cursor.where}: unknown operand role {token.text!r}") from None
            operands.append((self.value(cursor), role))
            if not cursor.accept("punct", ","):
                break
        spec = PRIMITIVES.get(kind) or NODES.get(kind)
        given = cursor.attrs()
        attrs = spec.complete_attrs(given) if spec is not None else given
        self.ir.instrs.append(Instr(kind, name, operands, attrs, spec))

    def define(self, cursor: Cursor) -> None:
        name = cursor.value_ref()
        cursor.expect("punct", "=")
        word = cursor.expect("word").text
        instr: AllocActivation | Instr
        if word == "alloc":
            instr = make_alloc(name, cursor.type())
        elif word == "view":
            source = self.value(cursor)
            view_type = cursor.type()
            offset = cursor.expect("number").text
            instr = make_view(name, source, view_type, int(offset))
        else:
            raise TextParseError(f"{cursor.where}: expected alloc or view after '%{name} =', found {word!r}")
        self.ir.instrs.append(instr)
        self.values[name] = instr  # type: ignore[assignment]

    def data(self, cursor: Cursor) -> None:
        name = cursor.value_ref()
        cursor.expect("punct", "=")
        weight = self.values.get(name)
        if not isinstance(weight, WeightVar) or weight.kind is not WeightKind.CONSTANT:
            raise TextParseError(f"{cursor.where}: %{name} is not a declared constant")
        if weight.value is not None:
            raise TextParseError(f"{cursor.where}: %{name} is given data twice")
        weight.value = cursor.data(weight.type)
