"""Text and DOT dumps of a graph Function, derived from the declarations.

The text form is exact and parses back (``glow_core.graph.parser.parse_function``): every
storage tensor with its type, one line per node in topological order, attributes written
exactly (those equal to their declared default are left out: the parser fills them from
the same declaration), and a trailing ``data`` section with every constant's elements.
"""

from __future__ import annotations

from typing import Any

from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.spec import OpSpec
from glow_core.text_syntax import format_attrs, format_data, format_label, format_value_ref

STORAGE_ROLES = {"Placeholder": "placeholder", "Constant": "constant"}
"""The word a storage line carries per storage kind (an output placeholder says ``output``)."""


def function_to_text(fn: Function, *, data: bool = True) -> str:
    """``%y = Kind %a, %b {attrs} : type [if %p]`` per node after the storage lines, then the
    constants' data (``data=False`` leaves it out: a shorter dump that does not parse back)."""
    lines = [f"function {format_label(fn.name)} ({len(fn)} nodes)"]
    storage = _storage(fn)
    for s in storage:
        role = "output" if getattr(s, "is_output", False) else STORAGE_ROLES[s.kind]
        lines.append(f"  {format_value_ref(s.name)} = {role} : {s.type}")
    for n in fn.topological_order():
        operands = ", ".join(format_value_ref(i.name) for i in n.inputs)
        when = "" if n.predicate is None else f" if {format_value_ref(n.predicate.name)}"
        attrs = format_attrs(shown_attrs(n))
        lines.append(f"  {format_value_ref(n.name)} = {n.kind} {operands}{attrs} : {n.type}{when}")
    constants = [s for s in storage if isinstance(s, Constant)]
    if data and constants:
        lines.append("data")
        lines += [f"  {format_value_ref(c.name)} = {format_data(c.value, c.type)}" for c in constants]
    return "\n".join(lines) + "\n"


def _storage(fn: Function) -> list[Node]:
    """Every placeholder of the module (unread inputs are part of the signature), then the
    constants the function reads, each in module order."""
    read = set(fn.storage())
    module = fn.module
    return [*module.placeholders.values(), *(c for c in module.constants.values() if c in read)]


def shown_attrs(n: Node) -> dict[str, Any]:
    """The node's attributes worth writing (see ``attrs_to_write``)."""
    return attrs_to_write(n.attrs, n.spec)


def attrs_to_write(attrs: dict[str, Any], spec: OpSpec | None) -> dict[str, Any]:
    """The attributes in declared order, less those equal (same type, same value) to their
    declared default, which a parser fills back in; undeclared ones (or all, without a
    declaration) last."""
    declared = spec.attrs if spec is not None else {}
    shown = {k: attrs[k] for k in declared if k in attrs and repr(attrs[k]) != repr(declared[k].default)}
    shown.update({k: v for k, v in attrs.items() if k not in declared})
    return shown


def _dot_id(node: Node) -> str:
    return '"' + node.name.replace('"', r"\"") + '"'


def function_to_dot(fn: Function) -> str:
    """A Graphviz digraph: storage as ellipses, operators as boxes, edges from operands."""
    lines = [f'digraph "{fn.name}" {{', "  rankdir=TB;", "  node [fontname=monospace, fontsize=10];"]
    for s in fn.storage():
        color = "lightblue" if s.kind == "Placeholder" else "lightgrey"
        lines.append(
            f'  {_dot_id(s)} [shape=ellipse, style=filled, fillcolor={color}, label="{s.name}\\n{s.type}"];'
        )
    for n in fn.topological_order():
        label = f"{n.kind}\\n{n.name}\\n{n.type}".replace('"', r"\"")
        shape = "box" if n.spec.is_primitive or n.kind == "Save" else "box3d"
        lines.append(f'  {_dot_id(n)} [shape={shape}, label="{label}"];')
        for i in n.inputs:
            lines.append(f"  {_dot_id(i)} -> {_dot_id(n)};")
        if n.predicate is not None:
            lines.append(f'  {_dot_id(n.predicate)} -> {_dot_id(n)} [style=dashed, label="if"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
