"""Text and DOT dumps of the instruction IR and of its memory plan.

The IR text is exact and parses back (``glow_core.ir.parser.parse_ir``): the weights with
their region, every instruction with its name, operand roles and attributes (declared
defaults left out, as in the graph text), views with their offset, then the constants'
data. The memory plan is not part of it: planning is a step that runs again on the parsed IR.
"""

from __future__ import annotations

import json

from glow_core.graph.printer import attrs_to_write
from glow_core.ir.instructions import (
    AllocActivation,
    DeallocActivation,
    Instr,
    IRFunction,
    TensorView,
    dealloc_name,
)
from glow_core.ir.memory import MemoryPlan
from glow_core.text_syntax import format_attrs, format_data, format_label, format_name, format_value_ref


def ir_to_text(ir: IRFunction, *, data: bool = True) -> str:
    """``declare`` (weights with their region), ``code`` (numbered instructions), ``data``."""
    lines = [f"function {format_label(ir.name)}", "declare {"]
    for w in ir.weights:
        lines.append(f"  {format_value_ref(w.name)} = {w.kind.value} : {w.type}")
    lines += ["}", "code {"]
    lines += [f"  {index:4d} {instr_to_text(instr)}" for index, instr in enumerate(ir.instrs)]
    lines.append("}")
    valued = [w for w in ir.weights if w.value is not None]
    if data and valued:
        lines.append("data")
        lines += [f"  {format_value_ref(w.name)} = {format_data(w.value, w.type)}" for w in valued]
    return "\n".join(lines) + "\n"


def instr_to_text(instr: Instr) -> str:
    """One instruction: ``%a = alloc T``, ``dealloc %a``, ``%v = view %a T +offset``, or
    ``Kind "name" @out %a, @in %b {attrs}``."""
    if isinstance(instr, AllocActivation):
        return f"{format_value_ref(instr.name)} = alloc {instr.type}"
    if isinstance(instr, DeallocActivation):
        named = "" if instr.name == dealloc_name(instr.alloc.name) else f" {format_name(instr.name)}"
        return f"dealloc {format_value_ref(instr.alloc.name)}{named}"
    if isinstance(instr, TensorView):
        source = format_value_ref(instr.source.name)
        return f"{format_value_ref(instr.name)} = view {source} {instr.type} +{instr.offset}"
    operands = ", ".join(f"{role.value} {format_value_ref(value.name)}" for value, role in instr.operands)
    attrs = format_attrs(attrs_to_write(instr.attrs, instr.spec))
    return f"{instr.kind} {json_name(instr.name)} {operands}{attrs}"


def json_name(name: str) -> str:
    """An instruction's own name: always quoted, so it never reads as a kind or a value."""
    return json.dumps(name)


def ir_to_dot(ir: IRFunction) -> str:
    """Instructions in order as a chain of boxes, with edges from the buffers they touch."""
    lines = [f'digraph "{ir.name}_ir" {{', "  node [fontname=monospace, fontsize=10];"]
    previous = None
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation | DeallocActivation | TensorView):
            continue
        node_id = f"i{index}"
        lines.append(f'  {node_id} [shape=box, label="{index}: {instr.kind}\\n{instr.name}"];')
        for value, role in instr.operands:
            value_id = f'"{value.root.name}"'
            lines.append(f"  {value_id} [shape=ellipse];")
            edge = f"  {node_id} -> {value_id}" if role.value != "@in" else f"  {value_id} -> {node_id}"
            lines.append(edge + f' [label="{role.value}"];')
        if previous:
            lines.append(f"  {previous} -> {node_id} [style=dotted];")
        previous = node_id
    lines.append("}")
    return "\n".join(lines) + "\n"


def memory_to_text(ir: IRFunction, plan: MemoryPlan) -> str:
    """Every region's layout, activation buffers with their lifetimes, then the totals."""
    lines = [f"memory plan of {ir.name}", "constants:"]
    lines += [f"  {off:>10d}  {name}" for name, off in plan.constant_offsets.items()]
    lines.append("placeholders:")
    lines += [f"  {off:>10d}  {name}" for name, off in plan.placeholder_offsets.items()]
    lines.append("activations (offset, size, live instructions):")
    for iv in sorted(plan.activations.values(), key=lambda i: i.start):
        lines.append(f"  {iv.offset:>10d} {iv.size:>10d}  [{iv.start}, {iv.end}]  {iv.name}")
    lines.append(plan.summary())
    return "\n".join(lines) + "\n"
