"""Importers for convolution and pooling (NCHW), including 1-D forms and ONNX padding rules.

glow's window primitives are 2-D with explicit (top, left, bottom, right) pads and floor
output sizes. ONNX's auto_pad and ceil_mode are turned into explicit pads here, and a 1-D
window op runs as a 2-D one over a height-1 image, which computes exactly the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from glow_core.errors import ShapeError
from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.node import Node

Pads = tuple[int, int, int, int]


def _as_2d(ctx: NodeContext, x: Node) -> tuple[Node, bool]:
    """``x`` as NCHW, and whether it was NCW (1-D) and must be reshaped back."""
    if x.type.rank == 4:
        return x, False
    if x.type.rank == 3:
        n, c, w = x.type.shape
        return ctx.b.Reshape(x, shape=(n, c, 1, w)), True
    raise ctx.refuse(
        f"only 1-D and 2-D {ctx.op_type} (input rank 3 or 4) is supported, input is {x.type}; "
        "3-D windows are not implemented in glow"
    )


def _spatial_attr(ctx: NodeContext, key: str, default: int, one_d: bool) -> tuple[int, int]:
    """A per-spatial-dim attribute (strides, dilations, kernel) in 2-D form."""
    values = [int(v) for v in ctx.attr(key, [default] * (1 if one_d else 2))]
    if len(values) != (1 if one_d else 2):
        raise ShapeError(f"{key} {values} does not match the number of spatial dims")
    return (1, values[0]) if one_d else (values[0], values[1])


def _pads(ctx: NodeContext, size: Sequence[int], window: tuple[Sequence[int], ...], one_d: bool) -> Pads:
    """Explicit (top, left, bottom, right) pads from ``pads`` or ``auto_pad``.

    ``window`` is (kernel, strides, dilations), all in 2-D form.
    """
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 if one_d else 4))]
        if one_d and len(pads) == 2:
            return (0, pads[0], 0, pads[1])
        if len(pads) != 4:
            raise ShapeError(f"pads {pads} need two entries per spatial dim")
        return (pads[0], pads[1], pads[2], pads[3])
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.refuse(f"auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begin, end = [], []
    for d, k, s, dil in zip(size, *window, strict=True):
        total = max((math.ceil(d / s) - 1) * s + (k - 1) * dil + 1 - d, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


def _back_to_1d(ctx: NodeContext, y: Node, one_d: bool) -> Node:
    if not one_d:
        return y
    n, c, _, w = y.type.shape
    return ctx.b.Reshape(y, shape=(n, c, w), name=ctx.name)


@importer("Conv")
def _conv(ctx: NodeContext) -> Node:
    x, one_d = _as_2d(ctx, ctx.node(0))
    w = ctx.node(1)
    if one_d and w.type.rank == 3:
        w = ctx.b.reshape(w, (w.type.shape[0], w.type.shape[1], 1, w.type.shape[2]))
    if w.type.rank != 4:
        raise ShapeError(f"weight {w.type} does not match the input rank")
    kernel = ctx.attr("kernel_shape")
    if kernel is not None and tuple((1, *kernel) if one_d else kernel) != w.type.shape[2:]:
        raise ShapeError(f"kernel_shape {list(kernel)} differs from the weight's {list(w.type.shape[2:])}")
    strides = _spatial_attr(ctx, "strides", 1, one_d)
    dilations = _spatial_attr(ctx, "dilations", 1, one_d)
    pads = _pads(ctx, x.type.shape[2:], (w.type.shape[2:], strides, dilations), one_d)
    y = ctx.b.conv(
        x,
        w,
        ctx.optional_node(2),
        strides=strides,
        pads=pads,
        dilations=dilations,
        group=int(ctx.attr("group", 1)),
        name=None if one_d else ctx.name,
    )
    return _back_to_1d(ctx, y, one_d)


def _ceil_extra(
    size: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads: Pads
) -> tuple[int, int]:
    """Extra end padding so glow's floor output size equals ONNX's ceil_mode size.

    As onnxruntime (and PyTorch) do, a last window that would start past the input and
    its leading pad is dropped, so every window still covers a real element or a pad.
    """
    extra = []
    for axis, (d, k, s) in enumerate(zip(size, kernel, strides, strict=True)):
        begin, end = pads[axis], pads[axis + 2]
        out = math.ceil((d + begin + end - k) / s) + 1
        if (out - 1) * s >= d + begin:
            out -= 1
        extra.append(max((out - 1) * s + k - (d + begin + end), 0))
    return extra[0], extra[1]


@importer("MaxPool", "AveragePool")
def _pool(ctx: NodeContext) -> Node:
    """Max/average pooling; average pads count per ``count_include_pad`` as onnxruntime does."""
    x, one_d = _as_2d(ctx, ctx.node(0))
    if ctx.attr("kernel_shape") is None:
        raise ctx.refuse("kernel_shape attribute is required")
    kernel = _spatial_attr(ctx, "kernel_shape", 1, one_d)
    strides = _spatial_attr(ctx, "strides", 1, one_d)
    if _spatial_attr(ctx, "dilations", 1, one_d) != (1, 1):
        raise ctx.refuse(f"dilations {ctx.attr('dilations')} are not supported for pooling (only 1)")
    pads = _pads(ctx, x.type.shape[2:], (kernel, strides, (1, 1)), one_d)
    extra = _ceil_extra(x.type.shape[2:], kernel, strides, pads) if ctx.attr("ceil_mode", 0) else (0, 0)
    padded = (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])
    name = None if one_d else ctx.name
    if ctx.op_type == "MaxPool":
        y = ctx.b.MaxPool(x, kernel=kernel, strides=strides, pads=padded, name=name)
    elif not ctx.attr("count_include_pad", 0):
        y = ctx.b.AvgPool(x, kernel=kernel, strides=strides, pads=padded, name=name)
    elif extra == (0, 0):
        y = ctx.b.AvgPool(x, kernel=kernel, strides=strides, pads=pads, count_include_pad=True, name=name)
    else:
        # Declared pads count in the divisor, the ceil overhang does not: pad with real
        # zeros first, then pool excluding only the overhang.
        zeros = ctx.b.Pad(x, pads=(0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]))
        y = ctx.b.AvgPool(zeros, kernel=kernel, strides=strides, pads=(0, 0, *extra), name=name)
    return _back_to_1d(ctx, y, one_d)


@importer("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeContext) -> Node:
    """Reduce over every spatial dim, keeping them as size 1 (as ONNX does)."""
    x = ctx.node(0)
    if x.type.rank < 3:
        raise ShapeError(f"input {x.type} has no spatial dims")
    kind = "ReduceMean" if ctx.op_type == "GlobalAveragePool" else "ReduceMax"
    return ctx.b.create(kind, x, axes=tuple(range(2, x.type.rank)), name=ctx.name)
