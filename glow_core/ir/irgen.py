"""IRGen: a scheduled graph becomes address-only instructions.

One node becomes one instruction (a primitive or a node the backend kept), with a fresh
activation buffer as its @out dest; a Reshape becomes a TensorView of its source's bytes; a
Save becomes a Copy into the output placeholder (copy elimination usually removes it).
Allocs are placed right before their producer, deallocs right after the last reader.
A node's predicate becomes an @pred operand of its instruction (a view, which computes
nothing, needs none).
"""

from __future__ import annotations

from glow_core.collector import without_collector
from glow_core.errors import VerifyError
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.ir.instructions import (
    Instr,
    IRFunction,
    Role,
    Value,
    WeightKind,
    WeightVar,
    make_alloc,
    make_copy,
    make_view,
)
from glow_core.ir.ir_passes import place_deallocs


@without_collector  # every instruction made here stays alive (``collector``)
def generate_ir(fn: Function, order: list[Node]) -> IRFunction:
    """Instructions for ``fn`` in the given node order (from ``schedule``)."""
    weights: dict[Node, WeightVar] = {}
    # Every public input is part of the signature, even one whose value the graph no longer
    # reads (only its shape mattered): callers pass a model's inputs, all of them.
    storage = fn.storage()
    unread_inputs = [p for p in fn.module.placeholders.values() if not p.is_output and p not in storage]
    for s in storage + unread_inputs:
        if isinstance(s, Constant):
            weights[s] = WeightVar(s.name, s.type, WeightKind.CONSTANT, s.value)
        elif isinstance(s, Placeholder):
            kind = WeightKind.OUTPUT if s.is_output else WeightKind.INPUT
            weights[s] = WeightVar(s.name, s.type, kind)
    values: dict[Node, Value] = dict(weights)
    instrs: list[Instr] = []
    for n in order:
        operands = [_value_of(values, i, n) for i in n.inputs]
        predicate = None if n.predicate is None else _value_of(values, n.predicate, n)
        if n.kind == "Save":
            instrs.append(make_copy(n.name, operands[1], operands[0], predicate))
        elif n.spec.view:
            view = make_view(n.name, operands[0], n.type)
            instrs.append(view)
            values[n] = view
        else:
            dest = make_alloc(n.name, n.type)
            instrs.append(dest)
            roles = [(dest, Role.OUT)] + [(v, Role.IN) for v in operands]
            if predicate is not None:
                roles.append((predicate, Role.PRED))
            instrs.append(Instr(n.kind, n.name, roles, dict(n.attrs), n.spec))
            values[n] = dest
    ir = IRFunction(fn.name, list(weights.values()), instrs)
    place_deallocs(ir)
    return ir


def _value_of(values: dict[Node, Value], operand: Node, user: Node) -> Value:
    try:
        return values[operand]
    except KeyError:
        raise VerifyError(
            f"IRGen: {user.kind} {user.name!r} reads {operand.name!r} before it is scheduled"
        ) from None
