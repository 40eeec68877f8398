"""TopK and ScatterElements: kernels whose output positions depend on the data.

Both avoid atomics and sorting networks, so they run alike on every device:

- **TopK** ranks instead of sorting: one work-item per input element counts the elements of
  its line that come before it (better value, or equal value and lower index: the stable
  order ONNX asks for, NaN above every number) and, when that rank is below ``k``, writes its own index at
  that rank. Ranks are a permutation of the line, so every output slot is written exactly
  once. O(n) per work-item, fully parallel, no local memory.
- **ScatterElements** copies ``data`` to the result, then one work-item per line of
  ``indices`` along ``axis`` applies that line's updates in order. Lines outside the axis
  touch disjoint result lines, so there is no race, duplicates resolve as in sequential
  code (the last write wins, reductions combine in order) and results are deterministic.
"""

from __future__ import annotations

from glow_core.ir.instructions import Instr
from glow_core.types import ElemKind
from glow_opencl.emit import ARITH, MOVE, emit_copy, emits
from glow_opencl.runtime import Target
from glow_opencl.source import (
    Kernel,
    Param,
    ctype,
    flatten,
    linear_kernel,
    load,
    maximum,
    minimum,
    storage_type,
    store,
    strides,
    unflatten,
)


def _better(a: str, b: str, elem: ElemKind, largest: bool) -> str:
    """Whether value ``a`` ranks strictly before value ``b``. NaN is above every number, as
    numpy sorts it: first among the largest, last among the smallest."""
    op = ">" if largest else "<"
    if elem.is_float and largest:
        return f"(!isnan({b}) && (isnan({a}) || {a} {op} {b}))"
    if elem.is_float:
        return f"(!isnan({a}) && (isnan({b}) || {a} {op} {b}))"
    return f"({a} {op} {b})"


# Keyed by the input's kind (the result is always int64). Values compare exactly in their own
# kind, as glow's reference does for integers.
@emits("TopK", kinds=ARITH)
def emit_topk(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    if d.type.size == 0:
        return []
    elem, attrs = s.type.elem, instr.attrs
    axis = attrs["axis"] % s.type.rank
    n, k, inner = s.type.shape[axis], attrs["k"], strides(s.type.shape)[axis]
    t = ctype(elem)
    before = _better("u", "v", elem, attrs["largest"])
    after = _better("v", "u", elem, attrs["largest"])
    lines = [
        f"const int line = i / {n}; const int j = i % {n};",
        f"const int outer = line / {inner}; const int w = line % {inner};",
        f"__global const {storage_type(elem)}* p = s + outer * {n * inner} + w;",
        f"const {t} v = {load('p', elem, f'j * {inner}')};",
        "int rank = 0;",
        f"for (int q = 0; q < {n}; ++q) {{",
        f"    const {t} u = {load('p', elem, f'q * {inner}')};",
        f"    rank += {before} || (q < j && !{after});",
        "}",
        f"if (rank < {k}) d[outer * {k * inner} + w + rank * {inner}] = j;",
    ]
    params = [Param("d", ElemKind.int64, writes=True), Param("s", elem)]
    return [linear_kernel("topk", params, [d, s], s.type.size, lines)]


def _combine(reduction: str, old: str, new: str, elem: ElemKind) -> str:
    """The value a ScatterElements update leaves, ``old`` being the value already there."""
    if reduction == "none":
        return new
    if reduction == "max":
        return maximum(old, new, elem)
    if reduction == "min":
        return minimum(old, new, elem)
    if elem is ElemKind.bool:  # numpy's bool add is or, its bool multiply and
        return f"({old} {'|' if reduction == 'add' else '&'} {new})"
    return f"({old} {'+' if reduction == 'add' else '*'} {new})"


@emits("ScatterElements", kinds=MOVE)
def emit_scatter_elements(instr: Instr, target: Target) -> list[Kernel]:
    d, idx, upd = instr.dest, instr.sources[1], instr.sources[2]
    kernels = emit_copy(instr, target)  # the result starts as a copy of data (sources[0])
    if idx.type.size == 0:
        return kernels
    elem, reduction = d.type.elem, instr.attrs["reduction"]
    ishape, dshape = idx.type.shape, d.type.shape
    axis = instr.attrs["axis"] % d.type.rank
    m, n = ishape[axis], dshape[axis]
    line_shape = tuple(1 if a == axis else e for a, e in enumerate(ishape))
    lines, coords = unflatten(line_shape, "i")  # the axis coordinate is "0"
    istep, dstep = strides(ishape)[axis], strides(dshape)[axis]
    lines += [
        f"const int ib = {flatten(coords, ishape)}; const int db = {flatten(coords, dshape)};",
        f"for (int j = 0; j < {m}; ++j) {{",
        f"    long at = {load('x', idx.type.elem, f'ib + j * {istep}')};",
        f"    if (at < 0) at += {n};",
        # Still out of range: clamped to the nearest element (glow's reference, clamped_index),
        # so a write never lands outside the buffer.
        f"    at = at < 0 ? 0 : (at >= {n} ? {n - 1} : at);",
        f"    const int o = db + (int)at * {dstep};",
        f"    const {ctype(elem)} was = {load('d', elem, 'o')};",
        f"    const {ctype(elem)} now = {load('u', elem, f'ib + j * {istep}')};",
        f"    {store('d', elem, 'o', _combine(reduction, 'was', 'now', elem))}",
        "}",
    ]
    params = [Param("d", elem, writes=True), Param("x", idx.type.elem), Param("u", elem)]
    count = idx.type.size // max(m, 1)
    kernels.append(linear_kernel("scatter", params, [d, idx, upd], count, lines))
    return kernels
