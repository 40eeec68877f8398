"""The EMIT table: instruction kind -> how to generate its OpenCL C, with the element kinds it runs.

Two shapes of entry:

- **scalar** (element-wise primitives, Splat, Broadcast, Convert): a C expression for one
  output element from its operands' values. ``fusion.py`` strings consecutive scalar entries
  into one kernel, so an element-wise chain reads and writes memory once.
- **kernel** (everything else): whole kernels (``Kernel`` records) for one instruction.

``kinds`` are the element kinds that select the kernel: the result's, or for an operator with
a fixed result kind (Compare, ArgMax) its ``kind_operand``'s, as ``BackendInfo.supports`` is
keyed. ``supports`` is derived from this table and the device's element kinds; no other list
of operators exists in this backend. GEMM and convolution live in ``gemm.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glow_core.ir.instructions import Instr
from glow_core.pipeline.data import register_once
from glow_core.types import UNSIGNED_INT_KINDS, ElemKind
from glow_opencl.runtime import Target
from glow_opencl.source import (
    BYTE_KINDS,
    Kernel,
    Param,
    broadcast_index,
    ctype,
    flatten,
    linear_kernel,
    literal,
    load,
    lowest,
    maximum,
    minimum,
    raw_literal,
    store,
    strides,
    unflatten,
    window_maximum,
)

FLOATS = frozenset({ElemKind.float32, ElemKind.float16, ElemKind.float64})
INTS = frozenset({ElemKind.int8, ElemKind.int16, ElemKind.int32, ElemKind.int64}) | UNSIGNED_INT_KINDS
ARITH = FLOATS | INTS
MOVE = ARITH | {ElemKind.bool}

KernelEmitter = Callable[[Instr, Target], list[Kernel]]
ScalarEmitter = Callable[[Instr, list[str]], str]
IndexMap = Callable[[Instr, str], str]


@dataclass(frozen=True)
class Entry:
    """How one instruction kind becomes OpenCL C, and for which result element kinds."""

    kinds: frozenset[ElemKind]
    kernel: KernelEmitter | None = None
    scalar: ScalarEmitter | None = None
    index: IndexMap | None = None  # scalar entries that read their operand elsewhere (Broadcast)
    host_operands: frozenset[int] = frozenset()
    """Operands a kernel emitter may read on the host when they are constants (int8's
    multiplier, split into integers where the device lacks double): not device kinds then."""


EMIT: dict[str, Entry] = {}


def _register(names: tuple[str, ...], entry: Entry) -> None:
    for name in names:
        register_once(EMIT, name, entry, "EMIT entry")


def emits(
    *names: str, kinds: frozenset[ElemKind], host_operands: frozenset[int] = frozenset()
) -> Callable[[KernelEmitter], KernelEmitter]:
    """Register a kernel emitter for ``names``."""

    def register(fn: KernelEmitter) -> KernelEmitter:
        _register(names, Entry(kinds, kernel=fn, host_operands=host_operands))
        return fn

    return register


def scalar(*names: str, kinds: frozenset[ElemKind], index: IndexMap | None = None):
    """Register a scalar (fusable) emitter for ``names``."""

    def register(fn: ScalarEmitter) -> ScalarEmitter:
        _register(names, Entry(kinds, scalar=fn, index=index))
        return fn

    return register


# ---- element-wise: one C expression per output element ---------------------------------

_INFIX = {"Add": "+", "Sub": "-", "Mul": "*"}
_CALL = {
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Tanh": "tanh",
    "Erf": "erf",
    "Pow": "pow",
    "Floor": "floor",
    "Sin": "sin",
    "Cos": "cos",
    "Atan": "atan",
}
_PREDICATE = {"eq": "==", "lt": "<", "le": "<="}
_BITWISE = {"and": "&", "or": "|", "xor": "^"}


@scalar("Add", "Sub", "Mul", kinds=ARITH)
def emit_infix(instr: Instr, args: list[str]) -> str:
    return f"({args[0]} {_INFIX[instr.kind]} {args[1]})"


@scalar("Div", kinds=ARITH)
def emit_div(instr: Instr, args: list[str]) -> str:
    """Integer quotients truncate (C, as ONNX). A zero divisor gives 0, and MIN / -1 wraps to
    MIN: on a CPU device either would otherwise trap and take the process down."""
    a, b = args
    elem = instr.dest.type.elem
    if elem.is_float:
        return f"({a} / {b})"
    if elem in UNSIGNED_INT_KINDS:
        return f"(({b} == 0) ? 0 : {a} / {b})"
    return f"(({b} == 0) ? 0 : ({b} == -1) ? -(ulong){a} : {a} / {b})"  # unsigned negation wraps


@scalar("Max", kinds=ARITH)
def emit_max(instr: Instr, args: list[str]) -> str:
    return maximum(args[0], args[1], instr.dest.type.elem)


@scalar("Min", kinds=ARITH)
def emit_min(instr: Instr, args: list[str]) -> str:
    return minimum(args[0], args[1], instr.dest.type.elem)


@scalar(*_CALL, kinds=FLOATS)
def emit_call(instr: Instr, args: list[str]) -> str:
    return f"{_CALL[instr.kind]}({', '.join(args)})"


@scalar("Bitwise", kinds=INTS | {ElemKind.bool})
def emit_bitwise(instr: Instr, args: list[str]) -> str:
    return f"({args[0]} {_BITWISE[instr.attrs['op']]} {args[1]})"


@scalar("Compare", kinds=MOVE)  # keyed by the operands' kind (the result is always bool)
def emit_compare(instr: Instr, args: list[str]) -> str:
    return f"(uchar)({args[0]} {_PREDICATE[instr.attrs['predicate']]} {args[1]})"  # NaN: false


@scalar("Select", kinds=MOVE)
def emit_select(instr: Instr, args: list[str]) -> str:
    return f"({args[0]} ? {args[1]} : {args[2]})"


@scalar("Splat", kinds=MOVE)
def emit_splat(instr: Instr, args: list[str]) -> str:
    return literal(instr.attrs["value"], instr.dest.type.elem)


def _broadcast_source(instr: Instr, flat: str) -> str:
    return broadcast_index(instr.dest.type.shape, instr.sources[0].type.shape, flat)


@scalar("Broadcast", kinds=MOVE, index=_broadcast_source)
def emit_broadcast(instr: Instr, args: list[str]) -> str:
    return args[0]


@scalar("Convert", kinds=MOVE)
def emit_convert(instr: Instr, args: list[str]) -> str:
    to = instr.dest.type.elem
    if to is ElemKind.bool:
        return f"(uchar)({args[0]} != 0)"  # numpy: nonzero (and NaN) is True
    if to in UNSIGNED_INT_KINDS and instr.sources[0].type.elem.is_float:
        # A negative float cast straight to an unsigned type is undefined in C; through long
        # it wraps, as numpy does on common hosts (uint64 keeps the direct cast for values
        # past the long range).
        if to is ElemKind.uint64:
            return f"(({args[0]} < 0) ? (ulong)(long)({args[0]}) : (ulong)({args[0]}))"
        return f"({ctype(to)})(long)({args[0]})"
    return f"({ctype(to)})({args[0]})"  # C casts truncate toward zero, as ONNX Cast


# ---- data movement: one work-item per output element -----------------------------------


def _raw(name: str, instr_value, writes: bool = False) -> Param:
    return Param(name, instr_value.type.elem, writes=writes, raw=True)


@emits("Copy", "Reshape", "BitCast", kinds=MOVE | BYTE_KINDS)
def emit_copy(instr: Instr, target: Target) -> list[Kernel]:
    """Bytes moved as the result's kind: a BitCast (a view, so only ever a Copy from one) is
    the same width, and reinterpreting through the pointer type keeps every bit."""
    d, s = instr.dest, instr.sources[0]
    params = [_raw("d", d, True), _raw("s", d)]
    return [linear_kernel("copy", params, [d, s], d.type.size, ["d[i] = s[i];"])]


@emits("Transpose", kinds=MOVE)
def emit_transpose(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    lines, coords = unflatten(d.type.shape, "i")
    in_coords = ["0"] * s.type.rank
    for k, axis in enumerate(instr.attrs["shuffle"]):
        in_coords[axis] = coords[k]
    lines.append(f"d[i] = s[{flatten(in_coords, s.type.shape)}];")
    return [linear_kernel("transpose", [_raw("d", d, True), _raw("s", s)], [d, s], d.type.size, lines)]


@emits("Slice", kinds=MOVE)
def emit_slice(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    starts, steps = instr.attrs["starts"], instr.attrs["steps"] or (1,) * s.type.rank
    lines, coords = unflatten(d.type.shape, "i")
    in_coords = [_affine(start, c, step) for start, c, step in zip(starts, coords, steps, strict=True)]
    lines.append(f"d[i] = s[{flatten(in_coords, s.type.shape)}];")
    return [linear_kernel("slice", [_raw("d", d, True), _raw("s", s)], [d, s], d.type.size, lines)]


def _affine(start: int, coord: str, step: int) -> str:
    """``start + coord * step`` with the zero and unit terms left out."""
    scaled = coord if step == 1 else ("0" if coord == "0" else f"{coord} * {step}")
    if start == 0:
        return scaled
    return str(start) if scaled == "0" else f"{start} + {scaled}"


@emits("Pad", kinds=ARITH)
def emit_pad(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    pads, rank = instr.attrs["pads"], s.type.rank
    lines, coords = unflatten(d.type.shape, "i")
    in_coords, checks = [], []
    for axis in range(rank):
        before, size = pads[axis], s.type.shape[axis]
        c = coords[axis] if before == 0 else f"({coords[axis]} - {before})"
        in_coords.append(c)
        if before or pads[axis + rank]:
            checks.append(f"{c} >= 0 && {c} < {size}" if before else f"{c} < {size}")
    fill = raw_literal(instr.attrs["value"], d.type.elem)
    inside = " && ".join(checks) or "1"
    lines.append(f"d[i] = ({inside}) ? s[{flatten(in_coords, s.type.shape)}] : {fill};")
    return [linear_kernel("pad", [_raw("d", d, True), _raw("s", s)], [d, s], d.type.size, lines)]


@emits("Concat", kinds=MOVE)
def emit_concat(instr: Instr, target: Target) -> list[Kernel]:
    """One kernel per input, each copying its slab: no per-element search for the source."""
    d, axis = instr.dest, instr.attrs["axis"] % instr.dest.type.rank
    shape = d.type.shape
    inner = strides(shape)[axis]
    kernels, offset = [], 0
    for s in instr.sources:
        extent = s.type.shape[axis]
        if s.type.size:
            lines = [
                f"const int inner = i % {inner}; const int t = i / {inner};",
                f"const int a = t % {extent}; const int outer = t / {extent};",
                f"d[(outer * {shape[axis]} + {offset} + a) * {inner} + inner] = s[i];",
            ]
            params = [_raw("d", d, True), _raw("s", s)]
            kernels.append(linear_kernel("concat", params, [d, s], s.type.size, lines))
        offset += extent
    return kernels


@emits("Gather", kinds=MOVE)
def emit_gather(instr: Instr, target: Target) -> list[Kernel]:
    d, data, idx = instr.dest, instr.sources[0], instr.sources[1]
    axis = instr.attrs["axis"] % data.type.rank
    r, n = idx.type.rank, data.type.shape[axis]
    lines, coords = unflatten(d.type.shape, "i")
    index = load("x", idx.type.elem, flatten(coords[axis : axis + r], idx.type.shape))
    # Negative indices count back (as numpy); out-of-range ones are clamped so that a bad
    # index can never read outside the buffer.
    lines += [
        f"long j = {index};",
        f"if (j < 0) j += {n};",
        f"j = clamp(j, 0L, {n - 1}L);",
    ]
    src = [*coords[:axis], "(int)j", *coords[axis + r :]]
    lines.append(f"d[i] = s[{flatten(src, data.type.shape)}];")
    params = [_raw("d", d, True), _raw("s", data), Param("x", idx.type.elem)]
    return [linear_kernel("gather", params, [d, data, idx], d.type.size, lines)]


# ---- reductions and pooling: one work-item per output element, static loops -------------


@emits("ReduceSum", "ReduceMax", kinds=ARITH)
def emit_reduce(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    elem, axes, shape = d.type.elem, instr.attrs["axes"], s.type.shape
    # Integer sums accumulate in 64 bits, then wrap to the result kind (as numpy's astype).
    acc_t = ctype(elem)
    if elem in INTS and instr.kind == "ReduceSum":
        acc_t = "ulong" if elem in UNSIGNED_INT_KINDS else "long"
    lines, coords = unflatten(d.type.shape, "i")
    base = flatten([("0" if a in axes else c) for a, c in enumerate(coords)], shape)
    init = "0" if instr.kind == "ReduceSum" else lowest(elem)
    lines += [f"{acc_t} acc = {init};", f"__global const {_ptr(elem)}* p = s + {base};"]
    in_strides = strides(shape)
    offset = " + ".join(f"r{a} * {in_strides[a]}" for a in axes)
    loops = [f"for (int r{a} = 0; r{a} < {shape[a]}; ++r{a}) {{" for a in axes]
    step = "acc += v;" if instr.kind == "ReduceSum" else f"acc = {maximum('acc', 'v', elem)};"
    lines += [*loops, f"    const {acc_t} v = {load('p', elem, offset)};", f"    {step}", "}" * len(axes)]
    lines.append(store("d", elem, "i", f"({ctype(elem)})acc"))
    params = [Param("d", elem, writes=True), Param("s", elem)]
    return [linear_kernel(instr.kind.lower(), params, [d, s], d.type.size, lines)]


def _ptr(elem: ElemKind) -> str:
    return "half" if elem is ElemKind.float16 else ctype(elem)


def _window_start(elem: ElemKind) -> str:
    """A MaxPool accumulator's start: NaN for floats (fmax gives it up to the first number),
    the kind's lowest value for integers."""
    return "NAN" if elem.is_float else lowest(elem)


@emits("MaxPool", kinds=ARITH)
@emits("AvgPool", kinds=FLOATS)
def emit_pool(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    elem, a = d.type.elem, instr.attrs
    (n, c, oh, ow), (h, w) = d.type.shape, s.type.shape[2:]
    (kh, kw), (sh, sw), pads = a["kernel"], a["strides"], a["pads"]
    is_max, t = instr.kind == "MaxPool", ctype(elem)  # half accumulates in float
    lines = [
        f"const int ox = i % {ow}; const int oy = (i / {ow}) % {oh}; const int nc = i / {oh * ow};",
        f"__global const {_ptr(elem)}* p = s + nc * {h * w};",
        f"const int y0 = oy * {sh} - {pads[0]}; const int x0 = ox * {sw} - {pads[1]};",
        f"{t} acc = {_window_start(elem) if is_max else '0'}; int count = 0;",
        f"for (int ky = 0; ky < {kh}; ++ky) {{",
        f"    const int y = y0 + ky; if (y < 0 || y >= {h}) continue;",
        f"    for (int kx = 0; kx < {kw}; ++kx) {{",
        f"        const int x = x0 + kx; if (x < 0 || x >= {w}) continue;",
        f"        const {t} v = {load('p', elem, f'y * {w} + x')};",
        f"        {'acc = ' + window_maximum('acc', 'v', elem) if is_max else 'acc += v'}; ++count;",
        "    }",
        "}",
    ]
    if not is_max:
        divisor = f"({t}){kh * kw}" if a["count_include_pad"] else f"({t})count"
        lines.append(f"acc /= {divisor};")
    lines.append(store("d", elem, "i", "acc"))
    params = [Param("d", elem, writes=True), Param("s", elem)]
    return [linear_kernel(instr.kind.lower(), params, [d, s], n * c * oh * ow, lines)]


# ---- scans along one axis: one work-item per line ----------------------------------------


def _line(shape: tuple[int, ...], axis: int) -> tuple[list[str], int, int]:
    """Statements setting ``base`` (first element of line ``i`` along ``axis``), the line's
    length and the stride between its elements."""
    inner = strides(shape)[axis]
    n = shape[axis]
    return [f"const int base = (i / {inner}) * {n * inner} + i % {inner};"], n, inner


@emits("CumReduce", kinds=ARITH)
def emit_cumreduce(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    a, elem = instr.attrs, d.type.elem
    axis = a["axis"] % s.type.rank
    lines, n, step = _line(s.type.shape, axis)
    op = "+" if a["op"] == "sum" else "*"
    order = f"for (int j = {n - 1}; j >= 0; --j)" if a["reverse"] else f"for (int j = 0; j < {n}; ++j)"
    update = f"acc = acc {op} {load('s', elem, f'base + j * {step}')};"
    write = store("d", elem, f"base + j * {step}", "acc")
    lines += [
        f"{ctype(elem)} acc = {'0' if op == '+' else '1'};",
        f"{order} {{",
        *(f"    {x}" for x in ([write, update] if a["exclusive"] else [update, write])),
        "}",
    ]
    params = [Param("d", elem, writes=True), Param("s", elem)]
    return [linear_kernel("cumreduce", params, [d, s], s.type.size // max(n, 1), lines)]


@emits("ArgMax", kinds=ARITH)  # keyed by the input's kind (the result is always int64)
def emit_argmax(instr: Instr, target: Target) -> list[Kernel]:
    d, s = instr.dest, instr.sources[0]
    elem = s.type.elem
    axis = instr.attrs["axis"] % s.type.rank
    lines, n, step = _line(s.type.shape, axis)
    # numpy: NaN is the largest value; ties go to the first (or, select_last, the last) index.
    if instr.attrs["select_last"]:
        better = "v >= best" + (" || isnan(v)" if elem.is_float else "")
    else:
        better = "v > best" + (" || (isnan(v) && !isnan(best))" if elem.is_float else "")
    lines += [
        f"{ctype(elem)} best = {load('s', elem, 'base')}; long at = 0;",
        f"for (int j = 1; j < {n}; ++j) {{",
        f"    const {ctype(elem)} v = {load('s', elem, f'base + j * {step}')};",
        f"    if ({better}) {{ best = v; at = j; }}",
        "}",
        "d[i] = at;",
    ]
    params = [Param("d", ElemKind.int64, writes=True), Param("s", elem)]
    return [linear_kernel("argmax", params, [d, s], d.type.size, lines)]
