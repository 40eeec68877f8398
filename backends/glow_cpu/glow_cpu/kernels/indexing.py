"""Data-dependent primitives along one axis: ArgMax, TopK, CumReduce, ScatterElements.

They all walk *lines*: a tensor seen as [outer, extent, inner], a line being the ``extent``
elements at fixed (outer, inner), ``inner`` apart. Threads take whole lines, except in
ScatterElements whose writes may collide (the last duplicate must win): it copies in
parallel, then scatters on one thread. Values compare in their own kind: floats ordered
(NaN handled explicitly), unsigned integers unsigned, so a uint64 above 2**63 is large.
"""

from __future__ import annotations

import math

from llvmlite import ir

from glow_core.types import ElemKind
from glow_cpu.emit import Kernel, Tensor, emits
from glow_cpu.kernels.movement import _flat_copy
from glow_cpu.kernels.ops import binary_op
from glow_cpu.kinds import NUMERIC_KINDS, UNSIGNED, compute_type
from glow_cpu.loops import F64, I1, I64, carried_loop, for_range, i64, row_major_strides


def _lines(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


def _line_base(b: ir.IRBuilder, line: ir.Value, extent: int, inner: int) -> ir.Value:
    """Offset of element 0 of ``line`` (numbered outer-major) in a [outer, extent, inner] tensor."""
    outer_index = b.udiv(line, i64(inner))
    inner_index = b.urem(line, i64(inner))
    return b.add(b.mul(outer_index, i64(extent * inner)), inner_index)


def _is_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    if isinstance(x.type, ir.IntType):
        return ir.Constant(I1, 0)
    return b.fcmp_unordered("uno", x, x)


def _compare(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, elem: ElemKind) -> ir.Value:
    """``x op y`` for compute values of ``elem``: ordered for floats (NaN compares false),
    unsigned for unsigned integers, signed otherwise."""
    if elem.is_float:
        return b.fcmp_ordered(op, x, y)
    if elem in UNSIGNED:
        return b.icmp_unsigned(op, x, y)
    return b.icmp_signed(op, x, y)


def _before(
    b: ir.IRBuilder,
    a: tuple[ir.Value, ir.Value],
    c: tuple[ir.Value, ir.Value],
    largest: bool,
    elem: ElemKind,
) -> ir.Value:
    """Whether (value, index) ``a`` comes before ``c`` in TopK's order: better value first,
    then the lower index. NaN is above every number, as numpy sorts it: first among the
    largest, last among the smallest."""
    (av, ai), (cv, ci) = a, c
    a_nan, c_nan = _is_nan(b, av), _is_nan(b, cv)
    numbers = b.and_(b.not_(a_nan), b.not_(c_nan))
    better = _compare(b, ">" if largest else "<", av, cv, elem)
    equal = _compare(b, "==", av, cv, elem)
    tie = b.or_(b.and_(numbers, equal), b.and_(a_nan, c_nan))
    nan_first = b.and_(a_nan, b.not_(c_nan)) if largest else b.and_(b.not_(a_nan), c_nan)
    first = b.or_(nan_first, b.and_(numbers, better))
    return b.or_(first, b.and_(tie, b.icmp_signed("<", ai, ci)))


@emits("ArgMax", kinds=NUMERIC_KINDS)  # keyed by what it reads (ArgMax.kind_operand)
def emit_argmax(k: Kernel) -> None:
    """The first (or last) index of the maximum; a NaN is the maximum, as in numpy."""
    dest, (src,) = k.dest, k.sources
    axis = k.attrs["axis"] % src.type.rank
    outer, extent, inner = _lines(src.shape, axis)
    last = k.attrs["select_last"]
    b = k.b
    start, stop = k.split(outer * inner)
    with for_range(b, stop, start, name="line") as line:
        base = _line_base(b, line, extent, inner)

        def step(a: ir.Value, carry: list[ir.Value]) -> list[ir.Value]:
            best, index = carry
            x = src.load(b, b.add(base, b.mul(a, i64(inner))))
            x_nan, best_nan = _is_nan(b, x), _is_nan(b, best)
            wins = _compare(b, ">=" if last else ">", x, best, src.elem)
            take = b.or_(
                b.and_(wins, b.not_(best_nan)), b.and_(x_nan, b.not_(best_nan) if not last else x_nan)
            )
            return [b.select(take, x, best), b.select(take, a, index)]

        _, index = carried_loop(b, i64(1), i64(extent), [src.load(b, base), i64(0)], step)
        dest.store(b, line, index)


@emits("TopK", kinds=NUMERIC_KINDS)  # keyed by what it reads
def emit_topk(k: Kernel) -> None:
    """k selection passes per line: each takes the first element (in TopK's order) after the
    one the previous pass took, so ties keep index order and no scratch is needed."""
    dest, (src,) = k.dest, k.sources
    axis = k.attrs["axis"] % src.type.rank
    outer, extent, inner = _lines(src.shape, axis)
    count, largest = k.attrs["k"], k.attrs["largest"]
    if count == 0:
        return
    b = k.b
    start, stop = k.split(outer * inner)
    with for_range(b, stop, start, name="line") as line:
        base = _line_base(b, line, extent, inner)
        out_base = _line_base(b, line, count, inner)
        first = src.load(b, base)

        def take(j: ir.Value, carry: list[ir.Value]) -> list[ir.Value]:
            prev_v, prev_i = carry
            has_prev = b.icmp_signed(">", j, i64(0))

            def scan(a: ir.Value, best: list[ir.Value]) -> list[ir.Value]:
                x = src.load(b, b.add(base, b.mul(a, i64(inner))))
                eligible = b.or_(b.not_(has_prev), _before(b, (prev_v, prev_i), (x, a), largest, src.elem))
                unset = b.icmp_signed("<", best[1], i64(0))
                better = b.or_(unset, _before(b, (x, a), (best[0], best[1]), largest, src.elem))
                chosen = b.and_(eligible, better)
                return [b.select(chosen, x, best[0]), b.select(chosen, a, best[1])]

            best_v, best_i = carried_loop(b, i64(0), i64(extent), [first, i64(-1)], scan)
            dest.store(b, b.add(out_base, b.mul(j, i64(inner))), best_i)
            return [best_v, best_i]

        carried_loop(b, i64(0), i64(count), [first, i64(-1)], take)


@emits("CumReduce", kinds=NUMERIC_KINDS)
def emit_cum_reduce(k: Kernel) -> None:
    """Running sum or product per line (floats accumulate in double, as the reference;
    integers wrap in their own width, signed or not alike)."""
    dest, (src,) = k.dest, k.sources
    axis = k.attrs["axis"] % src.type.rank
    outer, extent, inner = _lines(src.shape, axis)
    is_sum, exclusive, reverse = k.attrs["op"] == "sum", k.attrs["exclusive"], k.attrs["reverse"]
    floats = src.elem.is_float
    compute = compute_type(src.elem)
    acc_type = F64 if floats else compute
    identity = ir.Constant(acc_type, (0.0 if floats else 0) if is_sum else (1.0 if floats else 1))
    b = k.b
    start, stop = k.split(outer * inner)
    with for_range(b, stop, start, name="line") as line:
        base = _line_base(b, line, extent, inner)

        def step(a: ir.Value, carry: list[ir.Value]) -> list[ir.Value]:
            (acc,) = carry
            pos = b.sub(i64(extent - 1), a) if reverse else a
            at = b.add(base, b.mul(pos, i64(inner)))
            x = src.load(b, at)
            x = b.fpext(x, F64) if x.type != acc_type else x
            if floats:
                new = b.fadd(acc, x) if is_sum else b.fmul(acc, x)
            else:
                new = b.add(acc, x) if is_sum else b.mul(acc, x)
            out = acc if exclusive else new
            dest.store(b, at, b.fptrunc(out, compute) if out.type != compute else out)
            return [new]

        carried_loop(b, i64(0), i64(extent), [identity], step)


@emits("ScatterElements", kinds=NUMERIC_KINDS | {ElemKind.bool})
def emit_scatter_elements(k: Kernel) -> None:
    _flat_copy(k, k.dest, k.sources[0])
    k.phase()  # every thread's copy is done before any write lands
    dest, (_, indices, updates) = k.dest, k.sources
    axis = k.attrs["axis"] % dest.type.rank
    extent = dest.shape[axis]
    strides = row_major_strides(dest.shape)
    b = k.b
    with for_range(b, indices.type.size, name="update") as p:
        offset: ir.Value = i64(0)
        rest = p
        for d in reversed(range(indices.type.rank)):
            coord = b.urem(rest, i64(indices.shape[d]))
            rest = b.udiv(rest, i64(indices.shape[d]))
            if d == axis:
                coord = _normalized_index(b, indices, p, extent)
            offset = b.add(offset, b.mul(coord, i64(strides[d])))
        value = updates.load(b, p)
        if k.attrs["reduction"] != "none":
            value = _combine(b, k.attrs["reduction"], dest, dest.load(b, offset), value)
        dest.store(b, offset, value)


def _normalized_index(b: ir.IRBuilder, indices: Tensor, p: ir.Value, extent: int) -> ir.Value:
    """indices[p] as i64, negative counted back, clamped into range (never a wild write)."""
    index = indices.load(b, p)
    index = index if index.type == I64 else b.sext(index, I64)
    index = b.select(b.icmp_signed("<", index, i64(0)), b.add(index, i64(extent)), index)
    index = b.select(b.icmp_signed("<", index, i64(0)), i64(0), index)
    return b.select(b.icmp_signed(">=", index, i64(extent)), i64(extent - 1), index)


def _combine(b: ir.IRBuilder, reduction: str, dest: Tensor, old: ir.Value, new: ir.Value) -> ir.Value:
    """numpy's ``ufunc.at`` combination for the element kind (bools: add/max = or, mul/min = and):
    the element-wise primitive of the same name, so floats propagate NaN through max/min and
    unsigned integers compare unsigned."""
    if dest.elem is ElemKind.bool:
        return b.or_(old, new) if reduction in ("add", "max") else b.and_(old, new)
    return binary_op(reduction.capitalize(), dest.elem)(b, old, new)
