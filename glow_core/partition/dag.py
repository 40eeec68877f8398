"""Nodes assigned to devices -> groups that form a DAG (neighbours on one device merged).

Merging every node of one device into one partition can create a cycle: with
``a(acme) -> b(cpu) -> c(acme)``, {a, c} and {b} would each wait for the other. So each
node gets a *level*: the largest level among what it reads, plus one where that value
comes from another device. Nodes of one device and one level form a group. An edge
between groups always goes from a lower level to a higher one (same device, same level
is one group; another device adds one), so the groups form a DAG, and a node joins the
earliest group of its device that every value it reads is ready for: neighbours on one
device merge unless a path through another device runs between them. Parallel branches
of one level stay apart (they may run concurrently).
"""

from __future__ import annotations

from collections.abc import Sequence

from glow_core.graph.node import Node, is_storage

Group = tuple[int, list[Node]]
"""A device index and its nodes, in schedule order."""


def levels(order: Sequence[Node], assignment: dict[Node, int]) -> dict[Node, int]:
    """Each node's level (see the module docstring); ``order`` is topological.

    A node computed from constants alone (a bias reshaped and broadcast for an Add) whose
    readers all sit on its device takes the lowest level among them, so it joins their
    group instead of forming a partition of its own that hands a tensor over.
    """
    level: dict[Node, int] = {}
    floating: set[Node] = set()
    for node in order:
        device = assignment[node]
        here = 0
        for value in node.dependencies:
            if is_storage(value):
                continue
            here = max(here, level[value] + (assignment[value] != device))
        level[node] = here
        if node.kind != "Save" and all(is_storage(v) or v in floating for v in node.dependencies):
            floating.add(node)
    for node in reversed(order):
        readers = [u for u, _ in node.users]
        if node in floating and readers and all(assignment[u] == assignment[node] for u in readers):
            level[node] = min(level[u] for u in readers)
    return level


def group_by_level(order: Sequence[Node], assignment: dict[Node, int]) -> list[Group]:
    """The groups, listed by level then by first appearance: a dependency order.

    Nodes of one device and level that no edge inside the group connects (two parallel
    branches) form separate groups, so the runtime can run them concurrently; no edge
    runs between them, so the DAG stays one.
    """
    level = levels(order, assignment)
    root: dict[Node, Node] = {}

    def find(node: Node) -> Node:
        while root[node] is not node:
            root[node] = root[root[node]]
            node = root[node]
        return node

    for node in order:
        root[node] = node
        for value in node.dependencies:
            if value in root and level[value] == level[node] and assignment[value] == assignment[node]:
                root[find(value)] = find(node)
    groups: dict[tuple[int, Node], list[Node]] = {}
    for node in order:
        groups.setdefault((level[node], find(node)), []).append(node)
    ordered = sorted(groups.items(), key=lambda item: item[0][0])  # stable: first appearance
    return [(assignment[nodes[0]], nodes) for _, nodes in ordered]
