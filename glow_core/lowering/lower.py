"""The lowering driver."""

from __future__ import annotations

from collections.abc import Callable

from glow_core.errors import ShapeError, VerifyError
from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Node

ShouldLower = Callable[[Node], bool]


def lower_function(fn: Function, should_lower: ShouldLower | None = None) -> bool:
    """Lower every high-level node that ``should_lower`` allows (all when None).

    A lowering may itself create high-level nodes; the driver repeats until none that
    should be lowered remain. Returns whether anything changed.
    """
    changed = False
    while True:
        todo = [
            n
            for n in fn.topological_order()
            if n.spec.lowering is not None and (should_lower is None or should_lower(n))
        ]
        if not todo:
            return changed
        for n in todo:
            lower_node(fn, n)
        changed = True


def lower_node(fn: Function, n: Node) -> Node:
    """Replace one high-level node by its lowering; returns the replacement."""
    b = Builder(fn, prefix=f"{n.name}/", predicate=n.predicate)
    try:
        result = n.spec.call(lambda *ops, **attrs: n.spec.lowering(b, *ops, **attrs), n.inputs, n.attrs)
    except ShapeError as err:
        raise ShapeError(f"lowering {n.kind} {n.name!r}: {err}") from None
    if result.type != n.type:
        raise VerifyError(f"lowering of {n.kind} {n.name!r} gave {result.type}, expected {n.type}")
    fn.replace_all_uses(n, result)
    fn.erase(n)
    return result
