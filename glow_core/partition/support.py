"""Which devices run each node of the optimized graph, after each backend's lowering decisions.

A backend runs a node if it keeps the node (``should_lower`` is False) and declares it, or
if it lowers the node and declares every primitive the lowering builds. The lowering is
tried on a scratch copy of the node (its operands become fresh placeholders, constants
stay constants since a lowering may read their values), and the answer is cached per kind,
attributes and operand types: ResNet-50's 53 convolutions ask once per distinct shape.

Nothing falls back silently: a node no device runs is refused here, before anything
compiles, with its kind, element kind and the backends that were asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from glow_core.backend import Backend, selecting_kind
from glow_core.errors import GlowError, NoBackendError
from glow_core.graph.function import Function, Module
from glow_core.graph.node import Constant, Node
from glow_core.lowering import lower_function
from glow_core.partition.plan import Device

_Key = tuple


def _key(node: Node) -> _Key:
    """What support depends on: kind, attributes, and per operand its element kind, rank
    and constness (a lowering may fold a constant operand). Not the shapes, nor a weight's
    values: no lowering picks other primitives for them, so ResNet-50's convolutions ask a
    handful of times; each partition's compile-time support check stays as the safety net."""
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
    operands = tuple((i.type.elem, len(i.type.shape), isinstance(i, Constant)) for i in node.inputs)
    return node.kind, attrs, operands, node.type.elem, node.predicate is not None


class SupportTable:
    """Answers ``runs(node, device)``, caching per backend and node signature."""

    def __init__(self, devices: Sequence[Device]):
        self.devices = list(devices)
        self._cache: dict[tuple[int, _Key], bool] = {}
        # Each backend's support rule, its declarations read once (``Backend.support_check``).
        self._checks = {id(d.backend): d.backend.support_check() for d in self.devices}
        self._keys: dict[Node, _Key] = {}

    def key(self, node: Node) -> _Key:
        """``node``'s signature, computed once per node (attributes are printed for it)."""
        key = self._keys.get(node)
        if key is None:
            key = self._keys[node] = _key(node)
        return key

    def runs(self, node: Node, device: Device) -> bool:
        if node.kind == "Save":
            return True
        key = (id(device.backend), self.key(node))
        answer = self._cache.get(key)
        if answer is None:
            answer = self._cache[key] = self._decide(node, device.backend)
        return answer

    def _declares(self, backend: Backend, node: Node) -> bool:
        return self._checks[id(backend)](node)

    def _decide(self, node: Node, backend: Backend) -> bool:
        if node.spec.lowering is None or not backend.should_lower(node):
            return self._declares(backend, node)
        scratch = _scratch_copy(node)
        try:
            lower_function(scratch, backend.should_lower)
        except GlowError:
            return False
        return all(n.kind == "Save" or self._declares(backend, n) for n in scratch.nodes)


def _scratch_copy(node: Node) -> Function:
    """A one-node function computing ``node`` from fresh placeholders (and its constants)."""
    module = Module("support")
    fn = module.create_function()
    operands: list[Node] = []
    for index, value in enumerate(node.inputs):
        if isinstance(value, Constant):
            operands.append(module.create_constant(value.name, value.value))
        else:
            operands.append(module.create_placeholder(f"in{index}", value.type))
    predicate = None
    if node.predicate is not None:
        predicate = module.create_placeholder("predicate", node.predicate.type)
    copy = fn.add(Node(node.spec, operands, dict(node.attrs), node.type, node.name, predicate))
    fn.save(copy, "out")
    return fn


def assign_by_support(
    order: Sequence[Node], table: SupportTable, pinned: Mapping[Node, int] | None = None
) -> dict[Node, int]:
    """Each node -> its device by hand where ``pinned`` says, else the first device (in the
    caller's order) that runs it.

    Raises NoBackendError naming every node no device runs (up to ten), before anything
    compiles.
    """
    pinned = pinned or {}
    assignment: dict[Node, int] = {}
    refused: list[Node] = []
    for node in order:
        if node in pinned:
            assignment[node] = pinned[node]
            continue
        found = next((i for i, d in enumerate(table.devices) if table.runs(node, d)), None)
        if found is None:
            refused.append(node)
        else:
            assignment[node] = found
    if refused:
        raise no_backend_error(refused, table.devices)
    return assignment


def no_backend_error(refused: Sequence[Node], devices: Sequence[Device]) -> NoBackendError:
    asked = [d.label for d in devices]
    listed = "; ".join(f"{n.kind}[{selecting_kind(n).name}] {n.name!r}" for n in refused[:10])
    more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
    return NoBackendError(
        f"no backend of {asked} runs {len(refused)} node(s): {listed}{more}; add a backend that "
        "declares these kinds to the list (see `glow backends`), e.g. 'cpu' last as the catch-all"
    )


def lower_for_split(fn: Function, table: SupportTable) -> bool:
    """Lower, in ``fn``, each high-level node that a device earlier in the list runs only in
    part (a Conv whose Convolution a vendor backend runs, but not its bias Add), so that
    part can go there; returns whether anything was lowered.

    A node that the first device able to run any of its primitives also runs whole stays
    whole. Lowered primitives are the same for every backend (keeping a node is only a
    backend's choice of a fused kernel), so any device may take them.
    """
    first_whole: dict[_Key, int | None] = {}
    first_part: dict[_Key, int | None] = {}

    def earliest(node: Node, cache: dict[_Key, int | None], runs) -> int | None:
        key = table.key(node)
        if key not in cache:
            cache[key] = next((i for i, d in enumerate(table.devices) if runs(node, d)), None)
        return cache[key]

    def runs_a_part(node: Node, device: Device) -> bool:
        scratch = _scratch_copy(node)
        try:
            lower_function(scratch)
        except GlowError:
            return False
        return any(n.kind != "Save" and table._declares(device.backend, n) for n in scratch.nodes)

    def split(node: Node) -> bool:
        part = earliest(node, first_part, runs_a_part)
        if part is None:
            return False
        whole = earliest(node, first_whole, table.runs)
        return whole is None or part < whole

    return lower_function(fn, split)
