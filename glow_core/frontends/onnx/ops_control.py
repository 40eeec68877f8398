"""Importers for control flow whose iteration is known at load time: If, Scan, Loop.

glow graphs have no control flow; these ops are resolved while loading. If imports the
branch its (load-time) condition selects. Scan and Loop are unrolled: the body is
imported once per iteration with the iteration's inputs bound. A Loop whose trip count
or continuation condition is computed at run time (data-dependent iteration) is refused.
"""

from __future__ import annotations

import numpy as np

from glow_core.frontends.onnx.registry import NodeContext, Value, importer
from glow_core.graph.node import Node
from glow_core.spec import normalize_axis

MAX_UNROLL = 4096
"""The most iterations glow unrolls; longer loops are refused rather than built."""


@importer("If")
def _if(ctx: NodeContext) -> list[Value]:
    condition = ctx.static(0, "condition")
    if condition.size != 1:
        raise ctx.refuse(f"the condition must hold one value, got shape {condition.shape}")
    branch = "then_branch" if bool(condition.reshape(-1)[0]) else "else_branch"
    if branch not in ctx.graphs:
        raise ctx.refuse(f"attribute {branch!r} is missing")
    outputs = ctx.scope.import_graph(ctx.graphs[branch])
    if len(outputs) != ctx.num_outputs:
        raise ctx.refuse(f"{branch} gives {len(outputs)} outputs, the node declares {ctx.num_outputs}")
    return outputs


def _stack(ctx: NodeContext, steps: list[Value], axis: int, label: str) -> Value:
    """Per-iteration values joined along a new ``axis`` (arrays stay arrays)."""
    if all(isinstance(v, np.ndarray) for v in steps):
        return np.stack(steps, axis=axis)  # type: ignore[arg-type]
    nodes = [ctx.to_node(v, label) for v in steps]
    rank = nodes[0].type.rank + 1
    axis = normalize_axis(axis, rank)
    shaped = [ctx.b.Reshape(n, shape=n.type.shape[:axis] + (1,) + n.type.shape[axis:]) for n in nodes]
    return shaped[0] if len(shaped) == 1 else ctx.b.Concat(*shaped, axis=axis)


def _take(ctx: NodeContext, x: Value, axis: int, index: int) -> Value:
    """x[..., index, ...] along ``axis``, the axis removed."""
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=axis)
    shape = x.type.shape
    starts = tuple(index if i == axis else 0 for i in range(len(shape)))
    ends = tuple(index + 1 if i == axis else d for i, d in enumerate(shape))
    return ctx.b.Reshape(ctx.b.Slice(x, starts=starts, ends=ends), shape=shape[:axis] + shape[axis + 1 :])


@importer("Scan")
def _scan(ctx: NodeContext) -> list[Value]:
    """Unrolled over the static scan length: states carried, scan outputs stacked."""
    if ctx.opset < 9:
        raise ctx.refuse("Scan-8 (batched, with sequence_lens) is not supported; re-export with opset >= 9")
    body = ctx.graphs["body"]
    values = [ctx.value(i) for i in range(len(ctx.proto.input))]
    m = int(ctx.required_attr("num_scan_inputs"))
    states, scans = values[: len(values) - m], values[len(values) - m :]
    ranks = [v.ndim if isinstance(v, np.ndarray) else v.type.rank for v in scans]
    in_axes = [normalize_axis(a, r) for a, r in zip(ctx.attr("scan_input_axes", [0] * m), ranks, strict=True)]
    in_reverse = list(ctx.attr("scan_input_directions", [0] * m))
    shape_of = [v.shape if isinstance(v, np.ndarray) else v.type.shape for v in scans]
    length = shape_of[0][in_axes[0]]
    k = len(body.output) - len(states)
    per_step: list[list[Value]] = [[] for _ in range(k)]
    for t in range(length):
        slices = [
            _take(ctx, x, axis, length - 1 - t if reverse else t)
            for x, axis, reverse in zip(scans, in_axes, in_reverse, strict=True)
        ]
        outputs = ctx.scope.import_graph(body, [*states, *slices])
        states = outputs[: len(states)]
        for j in range(k):
            per_step[j].append(outputs[len(states) + j])
    out_axes = list(ctx.attr("scan_output_axes", [0] * k))
    out_reverse = list(ctx.attr("scan_output_directions", [0] * k))
    stacked = [
        _stack(ctx, steps[::-1] if reverse else steps, axis, "scan_out")
        for steps, axis, reverse in zip(per_step, out_axes, out_reverse, strict=True)
    ]
    return [*states, *stacked]


@importer("Loop")
def _loop(ctx: NodeContext) -> list[Value]:
    """Unrolled while the trip count and every iteration's condition are known at load time."""
    body = ctx.graphs["body"]
    trip = int(ctx.scalar(0, "trip count M")) if ctx.has(0) else None
    running = bool(ctx.scalar(1, "condition")) if ctx.has(1) else True
    if trip is None and not ctx.has(1):
        raise ctx.refuse("a Loop with neither trip count nor condition never ends")
    carried = [ctx.value(i) for i in range(2, len(ctx.proto.input))]
    k = len(body.output) - 1 - len(carried)
    per_step: list[list[Value]] = [[] for _ in range(k)]
    i = 0
    while running and (trip is None or i < trip):
        if i >= MAX_UNROLL:
            raise ctx.refuse(f"the loop runs more than {MAX_UNROLL} iterations; glow unrolls loops")
        inputs = [np.array(i, np.int64), np.array(running), *carried]
        outputs = ctx.scope.import_graph(body, inputs)
        condition = outputs[0]
        if isinstance(condition, Node):
            raise ctx.refuse(
                "the loop condition is computed at run time (data-dependent iteration), which glow "
                "does not support; glow unrolls loops whose iteration count is known at load time"
            )
        running = bool(np.asarray(condition).reshape(-1)[0])
        carried = outputs[1 : 1 + len(carried)]
        for j in range(k):
            per_step[j].append(outputs[1 + len(carried) + j])
        i += 1
    if k and i == 0:
        raise ctx.refuse("the loop runs zero times, so its scan outputs have no known shape")
    return [*carried, *(_stack(ctx, steps, 0, "loop_out") for steps in per_step)]


@importer("OptionalHasElement")
def _optional_has_element(ctx: NodeContext) -> np.ndarray:
    """Known at load time: glow values are plain tensors, so an optional is empty only when absent."""
    return np.array(ctx.has(0))


@importer("OptionalGetElement", "Optional")
def _optional_element(ctx: NodeContext) -> Value:
    """A plain tensor is its own optional and its own element."""
    if not ctx.has(0):
        raise ctx.refuse("an empty optional has no element glow could produce")
    return ctx.value(0)
