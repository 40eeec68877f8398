"""Text and DOT dumps of the instruction IR and of its memory plan."""

from __future__ import annotations

from glow_core.graph.printer import format_attrs
from glow_core.ir.instructions import AllocActivation, DeallocActivation, IRFunction, TensorView
from glow_core.ir.memory import MemoryPlan


def ir_to_text(ir: IRFunction) -> str:
    """``declare`` (weights with their region) then ``code`` (numbered instructions)."""
    lines = [f"function {ir.name}", "declare {"]
    for w in ir.weights:
        lines.append(f"  %{w.name} : {w.type} // {w.kind.value}")
    lines += ["}", "code {"]
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation):
            text = f"%{instr.name} = alloc {instr.type}"
        elif isinstance(instr, DeallocActivation):
            text = f"dealloc %{instr.alloc.name}"
        elif isinstance(instr, TensorView):
            text = f"%{instr.name} = view %{instr.source.name} {instr.type} +{instr.offset}"
        else:
            operands = ", ".join(f"{role.value} %{value.name}" for value, role in instr.operands)
            text = f"{instr.kind} {operands}{format_attrs(instr.attrs)}"
        lines.append(f"  {index:4d} {text}")
    lines.append("}")
    return "\n".join(lines) + "\n"


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
