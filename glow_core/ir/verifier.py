"""The IR verifier: every buffer is touched only while allocated, and types agree."""

from __future__ import annotations

from glow_core.errors import ShapeError, VerifyError
from glow_core.ir.instructions import AllocActivation, DeallocActivation, IRFunction, Role, TensorView
from glow_core.types import ElemKind


def verify_ir(ir: IRFunction) -> None:
    """Raise VerifyError listing every broken invariant of ``ir``."""
    problems: list[str] = []
    live: set[AllocActivation] = set()
    dead: set[AllocActivation] = set()
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation):
            live.add(instr)
            continue
        if isinstance(instr, DeallocActivation):
            live.discard(instr.alloc)
            dead.add(instr.alloc)
            continue
        for value, _ in instr.operands:
            root = value.root
            if isinstance(root, AllocActivation) and root not in live:
                state = "after its dealloc" if root in dead else "before its alloc"
                problems.append(f"{index}: {instr.kind} {instr.name!r} uses {root.name!r} {state}")
        problems.extend(f"{index}: {p}" for p in _check_types(instr))
    if problems:
        raise VerifyError(f"IR function {ir.name!r} is invalid:\n  " + "\n  ".join(problems))


def _check_types(instr) -> list[str]:
    predicates = instr.values(Role.PRED)
    if len(predicates) > 1 or any(p.type.elem is not ElemKind.bool or p.type.size != 1 for p in predicates):
        return [f"{instr.kind} {instr.name!r}: a predicate must be one bool element, got {predicates}"]
    if isinstance(instr, TensorView):
        ok = instr.type.nbytes + instr.offset * instr.type.elem.itemsize <= instr.source.type.nbytes
        return [] if ok else [f"view {instr.name!r} {instr.type} exceeds its source {instr.source.type}"]
    if instr.kind == "Copy":
        dest, src = instr.dest, instr.sources[0]
        return [] if dest.type == src.type else [f"Copy {instr.name!r}: {src.type} into {dest.type}"]
    if instr.spec is None:
        return []
    if instr.operands[0][1] is Role.IN:
        return [f"{instr.kind} {instr.name!r}: first operand must be the @out dest"]
    try:
        inferred = instr.spec.infer_type([v.type for v in instr.sources], instr.attrs)
    except ShapeError as err:
        return [f"{instr.kind} {instr.name!r}: {err}"]
    return (
        []
        if inferred == instr.dest.type
        else [f"{instr.kind} {instr.name!r}: dest {instr.dest.type}, operands give {inferred}"]
    )
