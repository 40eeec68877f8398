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


def _memory_needs(order: list[Node]) -> dict[Node, int]:
    """For each node: the peak bytes to compute it alone, operands scheduled greedily."""
    need: dict[Node, int] = {}
    for n in order:
        operands = [i for i in n.dependencies if not is_storage(i)]
        operands.sort(key=lambda i: need[i], reverse=True)
        held = 0
        peak = 0
        for i in operands:
            peak = max(peak, held + need[i])
            held += result_bytes(i)
        need[n] = max(peak, held + result_bytes(n))
    return need


def schedule(fn: Function) -> list[Node]:
    """A topological order of ``fn``'s nodes chosen to minimize peak live activation bytes.

    The greedy walk is a heuristic: with values shared between results it can lose to the
    plain topological order, so both are measured and the better one is kept.
    """
    topo = fn.topological_order()
    walk = _child_memory_order(topo)
    return walk if peak_live_bytes(walk) <= peak_live_bytes(topo) else topo


def _child_memory_order(topo: list[Node]) -> list[Node]:
    need = _memory_needs(topo)
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
            operands = [i for i in n.dependencies if not is_storage(i) and i not in done]
            # The stack pops last-in first: push the neediest operand last so it runs first.
            operands.sort(key=lambda i: need[i])
            stack.extend((i, False) for i in operands)
    return order


def _alias_root(n: Node) -> Node:
    while n.spec.view:
        n = n.inputs[0]
    return n


def peak_live_bytes(order: list[Node]) -> int:
    """The largest total of simultaneously live results under ``order``.

    A result is live from its producer until its last reader; a view keeps its source live.
    """
    position = {n: i for i, n in enumerate(order)}
    last_use: dict[Node, int] = {}
    for n in order:
        for i in n.dependencies:
            if not is_storage(i):
                root = _alias_root(i)
                last_use[root] = max(last_use.get(root, -1), position[n])
    peak = live = 0
    frees: dict[int, int] = {}
    for index, n in enumerate(order):
        live += result_bytes(n)
        peak = max(peak, live)
        if result_bytes(n):
            end = last_use.get(n, index)
            frees[end] = frees.get(end, 0) + result_bytes(n)
        live -= frees.pop(index, 0)
    return peak
