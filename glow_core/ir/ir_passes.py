"""IR optimizations on the address-only IR, one documented function each (as in Glow).

They read the operand roles and the in-place flags declared with each primitive; none of
them knows an operator by name.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.collector import collector_paused, without_collector
from glow_core.errors import GlowError
from glow_core.ir.instructions import (
    MEMORY_KINDS,
    AllocActivation,
    DeallocActivation,
    Instr,
    IRFunction,
    Role,
    TensorView,
    Value,
    WeightKind,
    WeightVar,
    make_dealloc,
    make_view,
)
from glow_core.pipeline.data import Level, Step, doc_line, registrar

IRPass = Callable[[IRFunction], bool]
IR_PASSES: dict[str, IRPass] = {}


ir_pass = registrar(IR_PASSES, "IR pass")
"""``@ir_pass("kebab-name")``: register an IR pass under a kebab-case name."""


def ir_step(name: str) -> Step:
    """The registered IR pass ``name`` as a pipeline step; KeyError when there is none."""
    ir_pass = IR_PASSES[name]
    paused = without_collector(ir_pass)  # the pass's new objects all stay alive (``collector``)
    return Step(name, lambda c: paused(c.ir), Level.IR, doc=doc_line(ir_pass))


def _use_spans(ir: IRFunction) -> dict[Value, tuple[int, int]]:
    """The first and last instruction positions that touch each root buffer (through views
    too), allocs and deallocs excluded.

    The passes only ever ask for these two ends of a buffer's uses, so they are kept
    instead of every position: one pass over the operands, nothing stored per use.
    """
    first: dict[Value, int] = {}
    last: dict[Value, int] = {}
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation | DeallocActivation):
            continue
        for value, _ in instr.operands:
            root = value.root if isinstance(value, TensorView) else value  # only views alias
            if root not in first:
                first[root] = index
            last[root] = index  # positions only grow: the last write is the last use
    return {root: (start, last[root]) for root, start in first.items()}


def _last_uses(ir: IRFunction) -> dict[Value, int]:
    """The last instruction position that touches each root buffer (through views too),
    allocs and deallocs excluded."""
    last: dict[Value, int] = {}
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation | DeallocActivation):
            continue
        for value, _ in instr.operands:
            last[value.root if isinstance(value, TensorView) else value] = index  # only views alias
    return last


def place_deallocs(ir: IRFunction) -> None:
    """(Re)place every dealloc right after the last instruction touching its buffer.

    The old deallocs are dropped while the new list is built: positions in the list as it
    stands order the uses just as well as positions in a list without them (two passes
    over the instructions, not three).
    """
    last_uses = _last_uses(ir)  # deallocs are skipped there
    after: dict[int, list[DeallocActivation]] = {}
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, AllocActivation):
            last = last_uses.get(instr, index)
            after.setdefault(last, []).append(make_dealloc(instr))
    out: list[Instr] = []
    for index, instr in enumerate(ir.instrs):
        if isinstance(instr, DeallocActivation):
            continue
        out.append(instr)
        deallocs = after.get(index)
        if deallocs:
            out.extend(deallocs)
    ir.instrs = out


@ir_pass("hoist-deallocs")
def hoist_deallocs(ir: IRFunction) -> bool:
    """Move each dealloc up to right after the last use of its buffer (frees memory early)."""
    before = [id(i) for i in ir.instrs]
    place_deallocs(ir)
    return [id(i) for i in ir.instrs] != before


@ir_pass("sink-allocs")
def sink_allocs(ir: IRFunction) -> bool:
    """Move each alloc down to right before the first use of its buffer; drop unused ones."""
    allocs = {i for i in ir.instrs if isinstance(i, AllocActivation)}
    placed: list[Instr] = []
    for instr in ir.instrs:
        if instr in allocs:
            continue
        reads = [] if isinstance(instr, DeallocActivation) else instr.operands
        for value, _ in reads:
            if value.root in allocs:
                placed.append(value.root)  # type: ignore[arg-type]
                allocs.discard(value.root)  # type: ignore[arg-type]
        placed.append(instr)
    # Deallocs of allocs nothing used were emitted before them: drop both.
    placed = [i for i in placed if not (isinstance(i, DeallocActivation) and i.alloc in allocs)]
    changed = [id(i) for i in placed] != [id(i) for i in ir.instrs]
    ir.instrs = placed
    return changed


def _replace_everywhere(ir: IRFunction, old: Value, new: Value) -> None:
    for instr in ir.instrs:
        instr.replace_operand(old, new)


@ir_pass("eliminate-copies")
def eliminate_copies(ir: IRFunction) -> bool:
    """Copy(output, buffer) -> the buffer's producer writes the output placeholder directly.

    The activation behind ``buffer`` (through views) is replaced by a view of the output
    when both have the same byte size and the output is written nowhere else. A predicated
    copy stays: its producer would write the output even when the predicate is false.
    """
    changed = False
    for copy in [i for i in ir.instrs if i.kind == "Copy" and i.predicate is None]:
        dest, src = copy.dest, copy.sources[0]
        root = src.root
        if not (
            isinstance(dest, WeightVar)
            and dest.kind is WeightKind.OUTPUT
            and isinstance(root, AllocActivation)
        ):
            continue
        writers = [i for i in ir.instrs if any(v is dest for v, r in i.operands if r is not Role.IN)]
        if writers != [copy] or root.type.nbytes != dest.type.nbytes or _offset_of(src) != 0:
            continue
        replacement: Value = dest if root.type == dest.type else make_view(root.name, dest, root.type)
        index = ir.instrs.index(root)
        ir.instrs.remove(copy)
        ir.instrs = [i for i in ir.instrs if not (isinstance(i, DeallocActivation) and i.alloc is root)]
        if isinstance(replacement, TensorView):
            ir.instrs[index] = replacement
        else:
            ir.instrs.pop(index)
        _replace_everywhere(ir, root, replacement)
        changed = True
    return changed


def _offset_of(value: Value) -> int:
    offset = 0
    while isinstance(value, TensorView):
        offset += value.offset
        value = value.source
    return offset


@ir_pass("concat-in-place")
def concat_in_place(ir: IRFunction) -> bool:
    """Concat(out, a, b, ...) -> the producers of a, b, ... write straight into their slices of out.

    Where every dimension before the concat axis is 1 (axis 1 of a batch-1 NCHW tensor, as
    in Inception's mixed blocks) each input is one contiguous run of the output, so its
    buffer becomes a view of the output at that run's offset and the Concat disappears.
    An input qualifies when it is an activation of its own (not a view, a weight or a
    placeholder), appears once in the Concat, and nothing writes it after the Concat; the
    output must be an activation the Concat alone writes; the pass acts only where every
    input qualifies.

    Runs after ``eliminate-copies`` (an output placeholder's Concat is left to it) and after
    ``share-buffers``: an input is then the one buffer its whole in-place chain (convolution,
    bias, ReLU) writes, so its view is live from the chain's first instruction, which is
    where a backend that fuses the chain writes the result. Run before it, only the chain's
    last buffer became the view, planned as live from the ReLU on, and glow-cpu's fused
    convolution wrote those bytes while they still held the branch's input (Inception-v3's
    pool branches: relative error 0.1).
    """
    changed = False
    for concat in [i for i in ir.instrs if i.kind == "Concat" and i.predicate is None]:
        out, inputs = concat.dest, concat.sources
        axis = concat.attrs["axis"] % len(out.type.shape)
        here = ir.instrs.index(concat)
        if not (
            isinstance(out, AllocActivation)
            and all(d == 1 for d in out.type.shape[:axis])
            and all(isinstance(x, AllocActivation) for x in inputs)
            and len({id(x) for x in inputs}) == len(inputs)
            and _written_only_by(ir, out, [concat])
            and all(not _written_after(ir, x, here) for x in inputs)
        ):
            continue
        first = min(ir.instrs.index(x) for x in inputs)
        ir.instrs.remove(out)
        ir.instrs.insert(first, out)  # the output's buffer now lives from the first producer on
        offset = 0
        for x in inputs:
            view = make_view(x.name, out, x.type, offset)
            ir.instrs[ir.instrs.index(x)] = view
            ir.instrs = [i for i in ir.instrs if not (isinstance(i, DeallocActivation) and i.alloc is x)]
            _replace_everywhere(ir, x, view)
            offset += x.type.size
        ir.instrs.remove(concat)
        changed = True
    if changed:
        apply_peepholes(ir)  # a nested Concat's inputs: views of a view become views of the root
        place_deallocs(ir)
    return changed


def _written_only_by(ir: IRFunction, value: Value, writers: list[Instr]) -> bool:
    found = [i for i in ir.instrs if any(v is value for v, r in i.operands if r is not Role.IN)]
    return found == writers


def _written_after(ir: IRFunction, value: Value, position: int) -> bool:
    return any(
        any(v.root is value for v, r in i.operands if r is not Role.IN) for i in ir.instrs[position + 1 :]
    )


@ir_pass("share-buffers")
def share_buffers(ir: IRFunction) -> bool:
    """An @out may reuse the buffer of an @in that dies at this instruction (declared in-place).

    The dest's alloc disappears; the operand's buffer lives on under the dest's uses. Only
    each buffer's first and last use position matter, computed once and merged as buffers
    merge (positions of the original list keep their order when instructions are removed),
    so the pass is linear in the IR, whatever the length of a chain of in-place merges;
    operands are renamed and deallocs placed once at the end.
    """
    span = _use_spans(ir)
    position = {id(instr): index for index, instr in enumerate(ir.instrs)}
    alias: dict[int, AllocActivation] = {}  # id(merged dest) -> the buffer that replaces it

    def resolve(value: Value) -> Value:
        while id(value) in alias:
            value = alias[id(value)]
        return value

    for instr in ir.instrs:
        if instr.spec is None or not instr.spec.inplace:
            continue
        dest, here = instr.dest, position[id(instr)]
        if not isinstance(dest, AllocActivation) or span[dest][0] != here:
            continue
        for name in instr.spec.inplace:
            operand = resolve(instr.operands[1 + instr.spec.operands.index(name)][0])
            if (
                isinstance(operand, AllocActivation)
                and operand.type == dest.type
                and span[operand][1] == here
            ):
                alias[id(dest)] = operand
                (first, _), (_, last) = span[operand], span.pop(dest)
                span[operand] = (first, last)
                break
    if not alias:
        return False
    ir.instrs = [i for i in ir.instrs if id(i) not in alias]
    for instr in ir.instrs:
        if any(id(v) in alias for v, _ in instr.operands):
            instr.operands = [(resolve(v), r) for v, r in instr.operands]
    place_deallocs(ir)
    return True


@ir_pass("eliminate-dead-stores")
def eliminate_dead_stores(ir: IRFunction) -> bool:
    """Instructions whose @out activation is never read again are removed (with their buffer)."""
    changed = False
    while True:
        last_uses = _last_uses(ir)
        dead = None
        for index, instr in enumerate(ir.instrs):
            if instr.kind in MEMORY_KINDS:
                continue
            outs = instr.values(Role.OUT, Role.INOUT)
            if outs and all(isinstance(v.root, AllocActivation) and last_uses[v.root] == index for v in outs):
                dead = instr
                break
        if dead is None:
            break
        ir.instrs.remove(dead)
        _drop_unused_allocs(ir)
        changed = True
    return changed


@ir_pass("peepholes")
def apply_peepholes(ir: IRFunction) -> bool:
    """Small local rewrites: a view of a view becomes one view of the root (offsets add up);
    a Copy whose source and dest are the same bytes disappears."""
    changed = False
    for instr in list(ir.instrs):
        if isinstance(instr, TensorView) and isinstance(instr.source, TensorView):
            inner = instr.source
            instr.operands = [(inner.source, Role.IN)]
            instr.offset += inner.offset
            changed = True
        elif instr.kind == "Copy" and instr.dest.root is instr.sources[0].root:
            src = instr.sources[0]
            if _offset_of(instr.dest) == _offset_of(src) and instr.dest.type == src.type:
                ir.instrs.remove(instr)
                changed = True
    if changed:
        _drop_unused_views(ir)
    return changed


def _drop_unused_views(ir: IRFunction) -> None:
    read = {v for i in ir.instrs for v, _ in i.operands}
    ir.instrs = [i for i in ir.instrs if not isinstance(i, TensorView) or i in read]


def _drop_unused_allocs(ir: IRFunction) -> None:
    used = _last_uses(ir)
    unused = {i for i in ir.instrs if isinstance(i, AllocActivation) and i not in used}
    ir.instrs = [
        i
        for i in ir.instrs
        if i not in unused and not (isinstance(i, DeallocActivation) and i.alloc in unused)
    ]


DEFAULT_IR_PIPELINE = (
    "peepholes",  # first: collapsed view chains let copy elimination see the root buffer
    "eliminate-copies",
    "share-buffers",
    "concat-in-place",  # after both (see the pass)
    "eliminate-dead-stores",
    "sink-allocs",
    "hoist-deallocs",
)


def optimize_ir(ir: IRFunction, pipeline: tuple[str, ...] = DEFAULT_IR_PIPELINE) -> dict[str, bool]:
    """Run the IR passes in order; returns which changed something."""
    unknown = [p for p in pipeline if p not in IR_PASSES]
    if unknown:
        raise GlowError(f"unknown IR pass(es) {unknown}; known: {sorted(IR_PASSES)}")
    with collector_paused():  # the passes' new objects all stay alive (``collector``)
        return {name: IR_PASSES[name](ir) for name in pipeline}
