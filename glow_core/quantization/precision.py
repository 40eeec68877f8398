"""Precision modes: float32 compute run in float16 or bfloat16 (Glow's
transformForPrecisionMode).

The pass runs on the lowered graph, where every node is a primitive (or a layer the
backend keeps), so whether the backend runs a node in the narrow kind is a plain lookup
in its declared support. Each float32 node the backend runs in the narrow kind is rebuilt
in it; float32 constants are stored narrow, float32 inputs are converted once where they
enter, and a value read in the other kind than it was computed in gets one Convert.
Results stay float32: every Save reads a float32 value, so callers see the same outputs.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.errors import ShapeError
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node
from glow_core.types import ElemKind

_F32 = ElemKind.float32
_KIND_ATTRS = ("elem",)
"""Attributes that name an element kind (Splat, Convert): float32 there means the target."""


def convert_precision(fn: Function, target: ElemKind, supports: Callable[[str, ElemKind], bool]) -> list[str]:
    """Rebuild ``fn``'s float32 compute in ``target`` where ``supports(kind, target)``;
    returns the names of the nodes left in float32."""
    module = fn.module
    as_kind: dict[tuple[Node, ElemKind], Node] = {}
    kept: list[str] = []

    def value(v: Node, kind: ElemKind) -> Node:
        """``v`` (a float32 value of the old graph) as ``kind``, converting at most once."""
        if v.type.elem is not _F32:
            return mapped.get(v, v)
        if (v, kind) in as_kind:
            return as_kind[(v, kind)]
        current = mapped.get(v, v)
        if isinstance(v, Constant) and kind is target:
            out: Node = module.create_constant(f"{v.name}/{target.value}", v.value.astype(target.dtype))
        elif current.type.elem is kind:
            out = current
        else:
            out = fn.builder().Convert(current, elem=kind.name, name=f"{v.name}/{kind.value}")
        as_kind[(v, kind)] = out
        return out

    mapped: dict[Node, Node] = {}
    for n in fn.topological_order():
        if n.kind == "Save" or n.type.elem is not _F32:
            continue
        narrow = n.spec.view or supports(n.kind, target)
        rebuilt = _rebuild(fn, n, target, value) if narrow else None
        if rebuilt is None:
            kept.append(n.name)
            continue
        mapped[n] = rebuilt
        as_kind[(n, target)] = rebuilt
    for n in mapped:
        # Saves and float32 readers read a float32 copy; the old node is left to DCE.
        fn.replace_all_uses(n, value(n, _F32))
    return kept


def _rebuild(fn: Function, n: Node, target: ElemKind, value: Callable[[Node, ElemKind], Node]) -> Node | None:
    """``n`` in ``target`` (its float32 operands converted), or None if its type rule refuses."""
    attrs = {k: (target.name if k in _KIND_ATTRS and v == _F32.name else v) for k, v in n.attrs.items()}
    inputs = [value(i, target) for i in n.inputs]
    try:
        new_type = n.spec.infer_type([i.type for i in inputs], attrs)
    except ShapeError:
        return None
    if new_type.elem is not target:
        return None
    return fn.add(
        Node(n.spec, inputs, attrs, new_type, fn.module.unique_name(f"{n.name}/{target.value}"), n.predicate)
    )
