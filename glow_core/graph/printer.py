"""Text and DOT dumps of a graph Function, derived from the declarations."""

from __future__ import annotations

from typing import Any

from glow_core.graph.function import Function
from glow_core.graph.node import Node


def format_attr(value: Any) -> str:
    """Attributes as they read in dumps: tuples without spaces, floats short."""
    if isinstance(value, tuple):
        return "(" + ",".join(format_attr(v) for v in value) + ")"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def format_attrs(attrs: dict[str, Any]) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in attrs.items()) + "}"


def function_to_text(fn: Function) -> str:
    """One line per storage and node, in topological order: ``%y = Kind %a, %b {attrs} : type``."""
    lines = [f"function {fn.name} ({len(fn)} nodes)"]
    for s in fn.storage():
        role = "output" if getattr(s, "is_output", False) else s.kind.lower()
        lines.append(f"  %{s.name} = {role} : {s.type}")
    for n in fn.topological_order():
        operands = ", ".join(f"%{i.name}" for i in n.inputs)
        when = "" if n.predicate is None else f" if %{n.predicate.name}"
        lines.append(f"  %{n.name} = {n.kind} {operands}{format_attrs(_shown_attrs(n))} : {n.type}{when}")
    return "\n".join(lines) + "\n"


def _shown_attrs(n: Node) -> dict[str, Any]:
    """The attributes worth a reader's eye: those that differ from their declared default."""
    declared = n.spec.attrs
    return {k: v for k, v in n.attrs.items() if k not in declared or repr(v) != repr(declared[k].default)}


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
