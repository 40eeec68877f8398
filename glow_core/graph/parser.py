"""Graph text back into a Function: the inverse of ``function_to_text``.

Generic over the declarations: a line's kind is looked up in the registries, its operands
and attributes are checked by that declaration (``complete_attrs`` fills the defaults the
printer leaves out), and its type is inferred by the declared type rule. A written type must
agree with the inferred one; leaving it out (``%y = Relu %x``) is fine in hand-written tests.
Lines are in topological order: a value is defined before it is read.

    function main
      %x = placeholder : f32<2x3>
      %y = output : f32<2x3>
      %w = constant : f32<2x3>
      %sum = Add %x, %w
      %save_y = Save %sum, %y
    data
      %w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import GlowError, ShapeError, TextParseError
from glow_core.graph.function import SAVE, Function, Module
from glow_core.graph.node import Constant, Node
from glow_core.spec import OpSpec, spec_of
from glow_core.text_syntax import Cursor

STORAGE_WORDS = ("placeholder", "output", "constant")


def parse_function(text: str, module_name: str = "module") -> Function:
    """The Function (in a new Module) that ``text`` describes; TextParseError names the line."""
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise TextParseError("empty graph text: expected 'function NAME'")
    number, header = lines[0]
    cursor = Cursor(header, f"line {number}")
    cursor.expect("word", "function")
    fn = Module(module_name).create_function(cursor.name())
    _GraphReader(fn).read(lines[1:])
    return fn


class _GraphReader:
    def __init__(self, fn: Function):
        self.fn = fn
        self.values: dict[str, Node] = {}
        self.unfilled: dict[str, Constant] = {}

    def read(self, lines: list[tuple[int, str]]) -> None:
        in_data = False
        for number, line in lines:
            cursor = Cursor(line, f"line {number}")
            if cursor.accept("word", "data"):
                cursor.done()
                in_data = True
                continue
            name = cursor.value_ref()
            cursor.expect("punct", "=")
            try:
                if in_data:
                    self.fill(cursor, name)
                else:
                    self.define(cursor, name)
            except TextParseError:
                raise
            except GlowError as err:
                raise TextParseError(f"{cursor.where}: %{name}: {err}") from None
            cursor.done()
        if self.unfilled:
            raise TextParseError(
                f"no data for constant(s) {sorted(self.unfilled)}: add them to the 'data' section"
            )

    def define(self, cursor: Cursor, name: str) -> None:
        if name in self.values:
            raise TextParseError(f"{cursor.where}: %{name} is defined twice")
        word = cursor.accept("word")
        if word is None:
            raise cursor.fail("a kind, or one of " + ", ".join(STORAGE_WORDS))
        if word.text in STORAGE_WORDS:
            cursor.expect("punct", ":")
            self.values[name] = self.storage(word.text, name, cursor.type())
        else:
            self.values[name] = self.node(cursor, word.text, name)

    def storage(self, word: str, name: str, type_) -> Node:
        module = self.fn.module
        if word == "constant":
            if module.unique_name(name) != name:
                raise TextParseError(f"%{name} is defined twice")
            const = Constant(name, np.empty(type_.shape, type_.dtype), type_)
            module.constants[name] = self.unfilled[name] = const
            return const
        return module.create_placeholder(name, type_, is_output=word == "output")

    def node(self, cursor: Cursor, kind: str, name: str) -> Node:
        spec = _spec(kind, cursor.where)
        inputs: list[Node] = []
        next_token = cursor.peek()
        if next_token is not None and next_token.kind == "value":
            inputs.append(self.read_value(cursor))
            while cursor.accept("punct", ","):
                inputs.append(self.read_value(cursor))
        try:
            attrs = spec.complete_attrs(cursor.attrs())
            inferred = spec.infer_type([i.type for i in inputs], attrs)
        except ShapeError as err:
            raise TextParseError(f"{cursor.where}: {kind} %{name}: {err}") from None
        if cursor.accept("punct", ":"):
            written = cursor.type()
            if written != inferred:
                raise TextParseError(
                    f"{cursor.where}: {kind} %{name} is written {written} but its operands give {inferred}"
                )
        predicate = self.read_value(cursor) if cursor.accept("word", "if") else None
        if self.fn.module.unique_name(name) != name:
            raise TextParseError(f"{cursor.where}: %{name} is defined twice")
        return self.fn.add(Node(spec, inputs, attrs, inferred, name, predicate))

    def read_value(self, cursor: Cursor) -> Node:
        name = cursor.value_ref()
        if name not in self.values:
            raise TextParseError(f"{cursor.where}: %{name} is read before it is defined")
        return self.values[name]

    def fill(self, cursor: Cursor, name: str) -> None:
        const = self.unfilled.pop(name, None)
        if const is None:
            known = "given data twice" if name in self.fn.module.constants else "not a constant"
            raise TextParseError(f"{cursor.where}: %{name} is {known}")
        const.value = cursor.data(const.type)


def _spec(kind: str, where: str) -> OpSpec:
    if kind == SAVE.name:
        return SAVE
    try:
        return spec_of(kind)
    except KeyError:
        raise TextParseError(f"{where}: no operator kind {kind!r} is declared") from None
