"""Importers for tensors known at load time: constants, shapes, casts, shape arithmetic.

Shapes are static in glow, so ``Shape`` is always a load-time value; ops that exist in
ONNX only to compute shapes (``Range``, ``Equal``, ``Where``...) have no glow primitive and
are supported only when folding can compute them, with a clear error otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import UnsupportedOpError
from glow_core.frontends.onnx import narrow_cast
from glow_core.frontends.onnx.fold import fold_node
from glow_core.frontends.onnx.registry import NodeContext, Value, elem_kind_of, importer
from glow_core.types import ElemKind


@importer("Constant")
def _constant(ctx: NodeContext) -> np.ndarray:
    attrs = ctx.attrs
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs or "value_floats" in attrs:
        return np.asarray(attrs.get("value_float", attrs.get("value_floats")), dtype=np.float32)
    if "value_int" in attrs or "value_ints" in attrs:
        return np.asarray(attrs.get("value_int", attrs.get("value_ints")), dtype=np.int64)
    given = ", ".join(sorted(attrs)) or "none"
    raise ctx.refuse(f"only tensor, float(s) and int(s) values are supported (attributes given: {given})")


@importer("Shape")
def _shape(ctx: NodeContext) -> np.ndarray:
    """The static shape, sliced by ``start``/``end`` (opset 15) like a Python slice."""
    shape = ctx.shape(0)
    start, end = ctx.attr("start", 0), ctx.attr("end", len(shape))
    return np.asarray(shape[start:end], dtype=np.int64)


@importer("Size")
def _size(ctx: NodeContext) -> np.ndarray:
    return np.asarray(math.prod(ctx.shape(0)), dtype=np.int64)


@importer("Cast", "CastLike", fold="always")
def _cast(ctx: NodeContext) -> Value:
    """A run-time Convert (casts of constants are folded before this runs); casts to or from
    float8, float4, int4 and int2 are lowered to byte tables and integer rounding instead."""
    x = ctx.node(0)
    if ctx.op_type == "Cast":
        try:
            kind = elem_kind_of(int(ctx.required_attr("to")), "the cast target")
        except UnsupportedOpError as err:
            raise ctx.refuse(str(err)) from None
    else:
        like = ctx.value(1)
        kind = like.type.elem if not isinstance(like, np.ndarray) else ElemKind.from_dtype(like.dtype)
    if kind == x.type.elem:
        return x
    if not (kind.is_narrow or x.type.elem.is_narrow):
        return ctx.b.Convert(x, elem=kind.name, name=ctx.name)
    round_mode = ctx.attr("round_mode", "up")
    if round_mode not in ("up", "down", "nearest"):
        raise ctx.refuse(f"round_mode {round_mode!r} is not one of up, down, nearest")
    saturate = bool(ctx.attr("saturate", 1))
    return narrow_cast.cast(ctx.b, x, kind, saturate=saturate, round_mode=round_mode, name=ctx.name)


# Ops whose result shape depends on input values (or that only ever compute shapes): glow
# computes them at load time, so every input must be known then.
_FOLD_ONLY = (
    "ConstantOfShape",
    "Range",
    "NonZero",
    "Unique",
    "BlackmanWindow",
    "HammingWindow",
    "HannWindow",
    "MelWeightMatrix",
)


@importer(*_FOLD_ONLY, fold="always")
def _fold_only(ctx: NodeContext) -> list[np.ndarray]:
    """Reached only when some input is computed at run time: its value is asked for (the
    runtime computes it per call), or the error names it and the graph inputs behind it."""
    why = f"{ctx.op_type} is computed at load time, so all its inputs must be known"
    given = {name: ctx.static(i, why) for i, name in enumerate(ctx.proto.input) if name}
    return fold_node(ctx.proto, given, ctx.opset)
