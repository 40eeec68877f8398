"""OpenCL C building blocks: element types, literals, index arithmetic, and the Kernel record.

Every kernel is specialized to static shapes: sizes and strides appear as literals, so the
OpenCL compiler folds divisions by constants and unrolls fixed loops. Buffer placement is
*not* baked in: each parameter is a (buffer, element offset) pair, so two instructions of the
same shape share one kernel in the program (ResNet-50 has many identical convolutions).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from glow_core.ir.instructions import Value, WeightKind, WeightVar
from glow_core.types import NARROW_KINDS, ElemKind, Type

INDEX_LIMIT = 2**31 - 1  # kernels index with 32-bit int: far faster on GPUs than 64-bit
LINEAR_GROUP = 256  # work-group size of one-work-item-per-element kernels

_COMPUTE = {
    ElemKind.float32: "float",
    ElemKind.float16: "float",  # half is storage only: vload_half/vstore_half need no extension
    ElemKind.float64: "double",  # only on devices with cl_khr_fp64 (Target.kinds)
    ElemKind.int8: "char",
    ElemKind.int16: "short",
    ElemKind.int32: "int",
    ElemKind.int64: "long",
    ElemKind.uint8: "uchar",
    ElemKind.uint16: "ushort",
    ElemKind.uint32: "uint",
    ElemKind.uint64: "ulong",
    ElemKind.bool: "uchar",
}
C_KINDS = frozenset(_COMPUTE)
"""Element kinds OpenCL C can hold; anything else (bfloat16, newer kinds) is never claimed."""
_MIN = {
    ElemKind.int8: "CHAR_MIN",
    ElemKind.int16: "SHRT_MIN",
    ElemKind.int32: "INT_MIN",
    ElemKind.int64: "LONG_MIN",
}
_SUFFIX = {ElemKind.int64: "L", ElemKind.uint32: "U", ElemKind.uint64: "UL"}


BYTE_KINDS = NARROW_KINDS
"""Kinds stored one element per byte that no kernel computes with (float8, int4...): they are
only ever moved, as uchar, by the entries that declare them (Copy, Reshape, BitCast)."""


def ctype(elem: ElemKind) -> str:
    """The C type values of ``elem`` are computed in."""
    return "uchar" if elem in BYTE_KINDS else _COMPUTE[elem]


def storage_type(elem: ElemKind, raw: bool = False) -> str:
    """The pointee type of a buffer of ``elem``; ``raw`` moves half as 16-bit patterns."""
    if elem is ElemKind.float16:
        return "ushort" if raw else "half"
    return ctype(elem)


def load(ptr: str, elem: ElemKind, index: str) -> str:
    """An expression reading element ``index`` of ``ptr`` in the compute type."""
    if elem is ElemKind.float16:
        return f"vload_half({index}, {ptr})"
    return f"{ptr}[{index}]"


def store(ptr: str, elem: ElemKind, index: str, value: str) -> str:
    """A statement writing ``value`` (compute type) to element ``index`` of ``ptr``."""
    if elem is ElemKind.float16:
        return f"vstore_half_rte({value}, {index}, {ptr});"
    return f"{ptr}[{index}] = {value};"


def literal(value: float | int | bool, elem: ElemKind) -> str:
    """``value`` as an OpenCL C literal of ``elem``'s compute type."""
    if elem.is_float:
        wide = elem is ElemKind.float64
        v = float(np.asarray(value).astype(elem.dtype).astype(np.float64 if wide else np.float32))
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return f"{v!r}" if wide else f"{v!r}f"
    if elem is ElemKind.bool:
        return "1" if value else "0"
    v = int(np.asarray(value).astype(elem.dtype))
    if elem in _MIN and v == np.iinfo(elem.dtype).min:
        return _MIN[elem]  # -2147483648 would be the negation of a too-large literal
    return f"{v}{_SUFFIX.get(elem, '')}"


def raw_literal(value: float | int, elem: ElemKind) -> str:
    """``value`` as a literal of the raw storage type (half as its 16-bit pattern)."""
    if elem is ElemKind.float16:
        return f"(ushort){int(np.float16(value).view(np.uint16))}"
    return literal(value, elem)


def lowest(elem: ElemKind) -> str:
    """The identity of max: -inf for floats, the type's minimum for integers."""
    return "(-INFINITY)" if elem.is_float else _MIN.get(elem, "0")  # unsigned: 0


def maximum(a: str, b: str, elem: ElemKind) -> str:
    """max(a, b) that propagates NaN like numpy (fmax would drop it); a, b are identifiers."""
    if elem.is_float:
        return f"(({a} > {b} || isnan({a})) ? {a} : {b})"
    return f"max({a}, {b})"


def window_maximum(a: str, b: str, elem: ElemKind) -> str:
    """The maximum a MaxPool window takes: NaN never wins (fmax), as the primitive says."""
    return f"fmax({a}, {b})" if elem.is_float else f"max({a}, {b})"


def minimum(a: str, b: str, elem: ElemKind) -> str:
    """min(a, b) that propagates NaN like numpy; a, b are identifiers."""
    if elem.is_float:
        return f"(({a} < {b} || isnan({a})) ? {a} : {b})"
    return f"min({a}, {b})"


def strides(shape: tuple[int, ...]) -> list[int]:
    """Row-major element strides of ``shape``."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def unflatten(shape: tuple[int, ...], flat: str, prefix: str = "c") -> tuple[list[str], list[str]]:
    """Statements splitting row-major index ``flat`` into one coordinate per dimension.

    Returns (statements, coordinate expressions); a size-1 dimension's coordinate is "0".
    """
    lines: list[str] = []
    coords = ["0"] * len(shape)
    live = [d for d, n in enumerate(shape) if n != 1]
    if not live:
        return lines, coords
    if len(live) == 1:
        coords[live[0]] = flat
        return lines, coords
    rest = f"{prefix}_r"
    lines.append(f"int {rest} = {flat};")
    for d in reversed(live[1:]):
        lines.append(f"const int {prefix}{d} = {rest} % {shape[d]}; {rest} /= {shape[d]};")
        coords[d] = f"{prefix}{d}"
    lines.append(f"const int {prefix}{live[0]} = {rest};")
    coords[live[0]] = f"{prefix}{live[0]}"
    return lines, coords


def flatten(coords: list[str], shape: tuple[int, ...]) -> str:
    """The row-major index of ``coords`` in ``shape`` (terms that are zero left out)."""
    terms = []
    for c, n, s in zip(coords, shape, strides(shape), strict=True):
        if c == "0" or n == 1:
            continue
        terms.append(c if s == 1 else f"({c}) * {s}")
    return " + ".join(terms) or "0"


def broadcast_index(out_shape: tuple[int, ...], in_shape: tuple[int, ...], flat: str) -> str:
    """The index into ``in_shape`` that numpy broadcasting reads for output index ``flat``."""
    lead = len(out_shape) - len(in_shape)
    out_strides, in_strides = strides(out_shape), strides(in_shape)
    terms = []
    for d, n in enumerate(in_shape):
        if n == 1:
            continue
        od = lead + d
        coord = flat if out_strides[od] == 1 else f"({flat} / {out_strides[od]})"
        if od > 0:
            coord = f"({coord} % {out_shape[od]})"
        terms.append(coord if in_strides[d] == 1 else f"{coord} * {in_strides[d]}")
    return " + ".join(terms) or "0"


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def constant_value(value: Value) -> np.ndarray | None:
    """The data of ``value`` when it is a whole compile-time constant (no view), else None."""
    root = value.root
    if value is not root or not isinstance(root, WeightVar) or root.kind is not WeightKind.CONSTANT:
        return None
    return np.asarray(root.value, dtype=value.type.dtype)


@dataclass(eq=False)
class DerivedConstant(Value):
    """A constant the backend derives at compile time (a repacked filter); code generation
    places it after the memory plan's constants, in the same device buffer."""

    name: str
    type: Type
    value: np.ndarray


@dataclass(frozen=True)
class Param:
    """A buffer parameter: emitted as a pointer plus an ``int`` element offset."""

    name: str
    elem: ElemKind
    writes: bool = False
    raw: bool = False  # data movement: half moves as ushort bit patterns


@dataclass
class Kernel:
    """One launch: OpenCL C text (named by its hash), sizes, and the IR values it binds."""

    hint: str
    params: list[Param]
    values: list[Value]
    body: list[str]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    helpers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert len(self.params) == len(self.values), "one IR value per parameter"

    def _text(self, name: str) -> str:
        sig, prologue = [], []
        for p in self.params:
            qual = "" if p.writes else "const "
            ptype = f"__global {qual}{storage_type(p.elem, p.raw)}*"
            sig.append(f"{ptype} {p.name}_, const int {p.name}_o")
            prologue.append(f"    {ptype} {p.name} = {p.name}_ + {p.name}_o;")
        attr = ""
        if self.local_size is not None:
            dims = (*self.local_size, 1, 1)[:3]
            attr = f"__attribute__((reqd_work_group_size({dims[0]}, {dims[1]}, {dims[2]}))) "
        body = "\n".join(f"    {line}" for line in self.body)
        return f"__kernel {attr}void {name}({', '.join(sig)})\n{{\n" + "\n".join(prologue) + f"\n{body}\n}}\n"

    @property
    def name(self) -> str:
        """``hint_`` + a hash of the text: equal kernels get equal names and are emitted once."""
        digest = hashlib.sha1(("\n".join(self.helpers) + self._text("K")).encode()).hexdigest()[:12]
        return f"{self.hint}_{digest}"

    def text(self) -> str:
        return "\n".join(self.helpers) + self._text(self.name)


def linear_kernel(hint: str, params: list[Param], values: list[Value], size: int, body: list[str]) -> Kernel:
    """A kernel with one work-item per element ``i`` of ``size`` elements (a 1-D NDRange)."""
    group = min(LINEAR_GROUP, round_up(max(size, 1), 32))
    guard = [] if size % group == 0 else [f"if (i >= {size}) return;"]
    lines = ["const int i = get_global_id(0);", *guard, *body]
    return Kernel(hint, params, values, lines, (round_up(size, group),), (group,))
