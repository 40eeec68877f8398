"""Module > Function: who owns which nodes, and the edits passes make.

A Module owns storage (public Placeholders and private Constants) shared by its Functions;
a Function owns its operator nodes. A function's results are ``Save`` nodes writing into
output Placeholders (as in Glow), so every result is an ordinary use and replace-all-uses
needs no special case for outputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from glow_core.errors import VerifyError
from glow_core.graph.node import STORAGE_SPECS, Constant, Node, Placeholder, is_storage, last_edit, note_edit
from glow_core.spec import OpSpec
from glow_core.types import Type


def _save_type(input: Type, output: Type) -> Type:
    return output


SAVE = OpSpec(
    name="Save",
    doc="Write ``input`` into the output placeholder ``output`` (a function result).",
    operands=("input", "output"),
    attrs={},
    type_rule=_save_type,
)


class Module:
    """The unit of compilation: storage plus one or more functions."""

    def __init__(self, name: str = "module"):
        self.name = name
        self.placeholders: dict[str, Placeholder] = {}
        self.constants: dict[str, Constant] = {}
        self.functions: dict[str, Function] = {}
        self._counter = itertools.count()
        # Every name ever given out; names of erased nodes stay reserved, which keeps
        # uniqueness O(1) without scanning the functions.
        self._names: set[str] = set()

    def unique_name(self, base: str) -> str:
        """``base`` if nothing in the module was named so yet, else ``base__N``; reserved."""
        name = base
        while not name or name in self._names:
            name = f"{base or 'node'}__{next(self._counter)}"
        self._names.add(name)
        return name

    def create_placeholder(self, name: str, type: Type, *, is_output: bool = False) -> Placeholder:
        if name in self.placeholders:
            raise VerifyError(f"placeholder {name!r} already exists in module {self.name!r}")
        self._names.add(name)
        ph = Placeholder(name, type, is_output=is_output)
        self.placeholders[name] = ph
        return ph

    def create_constant(self, name: str, value: np.ndarray) -> Constant:
        const = Constant(self.unique_name(name), value)
        self.constants[const.name] = const
        return const

    def create_function(self, name: str = "main") -> Function:
        if name in self.functions:
            raise VerifyError(f"function {name!r} already exists in module {self.name!r}")
        fn = Function(name, self)
        self.functions[name] = fn
        return fn

    @property
    def function(self) -> Function:
        """The only function (most modules loaded from ONNX have exactly one)."""
        if len(self.functions) != 1:
            raise VerifyError(f"module {self.name!r} has {len(self.functions)} functions, expected one")
        return next(iter(self.functions.values()))

    def drop_unused_constants(self) -> int:
        """Remove constants no node reads; returns how many were dropped."""
        dead = [name for name, c in self.constants.items() if not c.users]
        for name in dead:
            del self.constants[name]
        return len(dead)

    def clone(self) -> Module:
        """A structural copy (constant values shared) that compilation may edit freely."""
        copy = Module(self.name)
        mapping: dict[Node, Node] = {}
        for name, ph in self.placeholders.items():
            mapping[ph] = copy.create_placeholder(name, ph.type, is_output=ph.is_output)
        for name, const in self.constants.items():
            new = Constant(copy.unique_name(name), const.value, const.type)
            copy.constants[name] = new
            mapping[const] = new
        for name, fn in self.functions.items():
            new_fn = copy.create_function(name)
            for n in fn.topological_order():
                predicate = None if n.predicate is None else mapping[n.predicate]
                clone = Node(n.spec, [mapping[i] for i in n.inputs], dict(n.attrs), n.type, n.name, predicate)
                new_fn.add(clone)
                mapping[n] = clone
        return copy


class Function:
    """A graph of operator nodes over the module's storage."""

    def __init__(self, name: str, module: Module):
        self.name = name
        self.module = module
        self._nodes: dict[Node, None] = {}  # insertion-ordered set
        # topological_order's last answer and the edit stamp it was computed at: every
        # graph pass asks for the order, and most passes change nothing.
        self._order: list[Node] | None = None
        self._order_stamp = -1

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node: Node) -> bool:
        return node in self._nodes

    def nodes_of(self, kind: str) -> Iterator[Node]:
        """Nodes of one kind, safe to iterate while editing the function."""
        return iter([n for n in self._nodes if n.kind == kind])

    def add(self, node: Node) -> Node:
        self._nodes[node] = None
        self.module._names.add(node.name)
        note_edit()
        return node

    def erase(self, node: Node) -> None:
        """Remove a node nothing reads any more."""
        if node.users:
            raise VerifyError(f"cannot erase {node!r}: still used by {[u for u, _ in node.users]}")
        node.drop_inputs()
        del self._nodes[node]
        note_edit()

    def replace_all_uses(self, old: Node, new: Node) -> None:
        """Every reader of ``old`` except ``new`` itself reads ``new`` instead (types must match).

        ``new`` keeps reading ``old``, so wrapping a value (``x -> f(x)``) needs no special
        care and cannot create a cycle.
        """
        if old.type != new.type:
            raise VerifyError(f"replace {old!r} by {new!r}: types differ ({old.type} vs {new.type})")
        for user, index in list(old.users):
            if user is not new:
                user.set_input(index, new)

    def save(self, value: Node, name: str, predicate: Node | None = None) -> Placeholder:
        """Make ``value`` a result of this function, stored in a new output placeholder
        (written only when ``predicate``, if given, is true at run time)."""
        output = self.module.create_placeholder(name, value.type, is_output=True)
        save_name = self.module.unique_name(f"save_{name}")
        self.add(Node(SAVE, [value, output], {}, output.type, save_name, predicate))
        return output

    @property
    def saves(self) -> list[Node]:
        return [n for n in self._nodes if n.kind == "Save"]

    @property
    def inputs(self) -> list[Placeholder]:
        """Input placeholders this function reads, in module order."""
        read = {
            i for n in self._nodes for i in n.dependencies if isinstance(i, Placeholder) and not i.is_output
        }
        return [ph for ph in self.module.placeholders.values() if ph in read]

    @property
    def outputs(self) -> list[Placeholder]:
        return [s.operand("output") for s in self.saves]  # type: ignore[misc]

    def storage(self) -> list[Node]:
        """Placeholders and Constants this function reads or writes."""
        seen: dict[Node, None] = {}
        for n in self._nodes:
            for i in n.dependencies:
                if is_storage(i):
                    seen[i] = None
        return list(seen)

    def topological_order(self) -> list[Node]:
        """Operator nodes, each after its operands (insertion order breaks ties).

        A fresh list each call (callers edit the graph while walking it); it is copied from
        the one computed at the last graph edit, since passes that change nothing are the
        common case. Every edit path (``add``, ``erase``, ``Node.set_input``, the predicate
        setter, ``drop_inputs``) moves the stamp ``last_edit()`` returns."""
        stamp = last_edit()
        if self._order is None or self._order_stamp != stamp:
            self._order = self._compute_order()
            self._order_stamp = stamp
        return list(self._order)

    def _compute_order(self) -> list[Node]:
        """Depth-first post-order from each node in insertion order, operands (then the
        predicate) visited in order; raises VerifyError on a cycle."""
        order: list[Node] = []
        finish = order.append
        storage = {spec for spec in STORAGE_SPECS.values()}
        # 1: on the current DFS path (meeting one again is a cycle); 2: done or storage.
        state: dict[Node, int] = {}
        for root in self._nodes:
            if root in state:
                continue
            if root.spec in storage:
                state[root] = 2
                continue
            if _operands_done(root, state, storage):
                state[root] = 2  # the usual case: nodes are mostly added after their operands
                finish(root)
                continue
            state[root] = 1
            stack = [(root, iter(_operands_then_predicate(root)))]
            while stack:
                node, pending = stack[-1]
                for dep in pending:
                    seen = state.get(dep)
                    if seen == 2:
                        continue
                    if seen == 1:
                        raise VerifyError(
                            f"function {self.name!r}: the graph has a cycle through {dep.kind} {dep.name!r}"
                        )
                    if dep.spec in storage:
                        state[dep] = 2
                        continue
                    state[dep] = 1
                    stack.append((dep, iter(_operands_then_predicate(dep))))
                    break
                else:
                    stack.pop()
                    state[node] = 2
                    finish(node)
        return order

    def builder(self):
        from glow_core.graph.builder import Builder

        return Builder(self)


def _operands_then_predicate(node: Node) -> list[Node] | tuple[Node, ...]:
    """What ``node`` depends on, without building a tuple when it has no predicate."""
    return node._inputs if node._predicate is None else node.dependencies


def _operands_done(node: Node, state: dict[Node, int], storage: set) -> bool:
    """True when everything ``node`` reads is storage or already placed (state 2), so the
    walk can place it without a stack; storage met on the way is marked placed."""
    for dep in _operands_then_predicate(node):
        if state.get(dep) != 2:
            if dep.spec not in storage:
                return False
            state[dep] = 2
    return True
