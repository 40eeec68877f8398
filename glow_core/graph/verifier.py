"""The graph verifier: the type rules are the checks.

Every node's type is re-inferred from its operands and compared with the stored one, so a
pass that edits a graph into an inconsistent state is caught right after it runs.
"""

from __future__ import annotations

from glow_core.errors import ShapeError, VerifyError
from glow_core.graph.function import Function
from glow_core.graph.node import PREDICATE, Placeholder, is_storage


def verify(fn: Function) -> None:
    """Raise VerifyError listing every broken invariant of ``fn``."""
    problems: list[str] = []
    nodes = set(fn.nodes)
    module = fn.module
    for n in fn.nodes:
        uses = list(enumerate(n.inputs))
        if n.predicate is not None:
            uses.append((PREDICATE, n.predicate))
        for index, value in uses:
            if is_storage(value):
                owner = module.placeholders if isinstance(value, Placeholder) else module.constants
                if owner.get(value.name) is not value:
                    problems.append(f"{n.kind} {n.name!r} reads storage {value.name!r} not in the module")
            elif value not in nodes:
                problems.append(
                    f"{n.kind} {n.name!r} operand {index} ({value.name!r}) is not in the function"
                )
            if (n, index) not in value.users:
                what = "predicate" if index == PREDICATE else f"operand {index}"
                problems.append(f"use list of {value.name!r} misses {n.name!r} {what}")
        problems.extend(_check_type(n))
    problems.extend(_check_saves(fn))
    try:
        fn.topological_order()
    except VerifyError as err:
        problems.append(str(err))
    if problems:
        raise VerifyError(f"function {fn.name!r} is invalid:\n  " + "\n  ".join(problems))


def _check_type(n) -> list[str]:
    if n.kind == "Save":
        return []
    try:
        inferred = n.spec.infer_type([i.type for i in n.inputs], n.attrs)
    except ShapeError as err:
        return [f"{n.kind} {n.name!r}: {err}"]
    if inferred != n.type:
        return [f"{n.kind} {n.name!r} has type {n.type} but its operands give {inferred}"]
    return []


def _check_saves(fn: Function) -> list[str]:
    problems = []
    seen = set()
    for save in fn.saves:
        value, output = save.inputs
        if not (isinstance(output, Placeholder) and output.is_output):
            problems.append(f"Save {save.name!r} writes {output.name!r}, which is not an output placeholder")
        elif output in seen:
            problems.append(f"output {output.name!r} is saved twice")
        if value.type != output.type:
            problems.append(f"Save {save.name!r}: {value.type} into {output.type}")
        seen.add(output)
    return problems
