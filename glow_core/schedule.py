"""Scheduling: a linear order of the graph's nodes that keeps peak live memory low.

After Glow's child-memory-size scheduler: the order is a post-order walk from the results,
visiting first the operand whose subtree needs the most memory, so big temporary subtrees
finish (and free their buffers) before small results are held across them (Sethi-Ullman).
Reshapes are views and own no bytes; storage (placeholders, constants) is not activation
memory and is never counted.
"""

from __future__ import annotations

from glow_core.graph.function import Function
from glow_core.graph.node import Node, is_storage


def result_bytes(n: Node) -> int:
    """Activation bytes a node's result occupies (views and storage own none)."""
    if is_storage(n) or n.spec.view or n.kind == "Save":
        return 0
    return n.type.nbytes


class _Facts:
    """What the scheduler asks of each node many times, worked out once per node.

    Both candidate orders, the memory needs and the walk all read each node's non-storage
    operands, its result's size and the buffer its operands alias; computed per call they
    cost more than the scheduling itself on a graph of tens of thousands of nodes.
    """

    def __init__(self, nodes: list[Node]):
        self.sizes: dict[Node, int] = {n: result_bytes(n) for n in nodes}
        # Operands in order with repeats: a node reading one value twice holds it twice.
        self.operands: dict[Node, list[Node]] = {
            n: [i for i in n.dependencies if not is_storage(i)] for n in nodes
        }
        roots: dict[Node, Node] = {}
        self.reads: dict[Node, list[Node]] = {
            n: [_alias_root(i, roots) for i in self.operands[n]] for n in nodes
        }

    def peak_live_bytes(self, order: list[Node]) -> int:
        """``peak_live_bytes`` for an order of the nodes these facts were made for."""
        last_use: dict[Node, int] = {}
        for index, n in enumerate(order):
            for root in self.reads[n]:
                last_use[root] = index  # positions only grow: the last write is the max
        sizes = self.sizes
        peak = live = 0
        frees: dict[int, int] = {}
        for index, n in enumerate(order):
            size = sizes[n]
            if size:
                live += size
                peak = max(peak, live)
                end = last_use.get(n, index)
                frees[end] = frees.get(end, 0) + size
            live -= frees.pop(index, 0)
        return peak


def _memory_needs(order: list[Node], facts: _Facts) -> dict[Node, int]:
    """For each node: the peak bytes to compute it alone, operands scheduled greedily."""
    need: dict[Node, int] = {}
    sizes = facts.sizes
    for n in order:
        operands = sorted(facts.operands[n], key=need.__getitem__, reverse=True)
        held = 0
        peak = 0
        for i in operands:
            peak = max(peak, held + need[i])
            held += sizes[i]
        need[n] = max(peak, held + sizes[n])
    return need


def schedule(fn: Function) -> list[Node]:
    """A topological order of ``fn``'s nodes chosen to minimize peak live activation bytes.

    The greedy walk is a heuristic: with values shared between results it can lose to the
    plain topological order, so both are measured and the better one is kept.
    """
    topo = fn.topological_order()
    facts = _Facts(topo)
    walk = _child_memory_order(topo, facts)
    return walk if facts.peak_live_bytes(walk) <= facts.peak_live_bytes(topo) else topo


def _child_memory_order(topo: list[Node], facts: _Facts) -> list[Node]:
    need = _memory_needs(topo, facts)
    order: list[Node] = []
    done: set[Node] = set()
    roots = [n for n in topo if not n.users]  # Saves, plus any dead node still present
    for root in roots:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if n in done:
                continue
            if expanded:
                done.add(n)
                order.append(n)
                continue
            stack.append((n, True))
            operands = [i for i in facts.operands[n] if i not in done]
            # The stack pops last-in first: push the neediest operand last so it runs first.
            operands.sort(key=need.__getitem__)
            stack.extend((i, False) for i in operands)
    return order


def _alias_root(n: Node, roots: dict[Node, Node]) -> Node:
    """The node owning ``n``'s bytes (a view's source, followed to the end), memoized in
    ``roots``: chains of reshapes are walked once, not once per reader."""
    root = roots.get(n)
    if root is None:
        root = n
        while root.spec.view:
            root = root.inputs[0]
        roots[n] = root
    return root


def peak_live_bytes(order: list[Node]) -> int:
    """The largest total of simultaneously live results under ``order``.

    A result is live from its producer until its last reader; a view keeps its source live.
    """
    return _Facts(order).peak_live_bytes(order)
