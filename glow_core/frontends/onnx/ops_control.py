"""Importers for control flow, resolved while loading: If, Scan, Loop.

glow graphs have no control flow; these ops are resolved while loading. If imports the
branch its (load-time) condition selects. Scan and Loop are unrolled: the body is
imported once per iteration with the iteration's inputs bound. A condition or trip count
computed from the inputs is a load-time value like any other: ``load_onnx`` refuses it with
``LoadTimeValueError``, and the runtime (``glow_core.load``) computes it per call. Branch
outputs and loop-carried values may be sequences or optionals (load-time structure, see
``ops_sequence.py``): a Loop that appends to a sequence builds a longer list each iteration.
"""

from __future__ import annotations

import numpy as np
import onnx

from glow_core.frontends.onnx.registry import (
    AnyValue,
    LoadTimeValueError,
    NodeContext,
    Value,
    importer,
    kind_of,
)
from glow_core.graph.node import Node

MAX_UNROLL = 4096
"""The most iterations glow unrolls; longer loops are refused rather than built."""


@importer("If")
def _if(ctx: NodeContext) -> list[AnyValue]:
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


def _stack(ctx: NodeContext, steps: list[AnyValue], axis: int, label: str) -> Value:
    """Per-iteration values joined along a new ``axis`` (arrays stay arrays)."""
    odd = next((v for v in steps if not isinstance(v, Node | np.ndarray)), None)
    if odd is not None:
        raise ctx.refuse(f"a scan output is {kind_of(odd)}; glow stacks tensors only (carry sequences)")
    if all(isinstance(v, np.ndarray) for v in steps):
        return np.stack(steps, axis=axis)  # type: ignore[arg-type]
    nodes = [ctx.to_node(v, label) for v in steps]
    rank = nodes[0].type.rank + 1
    axis = ctx.axis(axis, rank, "attribute 'scan_output_axes': axis")
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


def _shape(value: Value) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, np.ndarray) else value.type.shape


def _body(ctx: NodeContext) -> onnx.GraphProto:
    if "body" not in ctx.graphs:
        raise ctx.refuse("attribute 'body' is missing")
    return ctx.graphs["body"]


def _unroll_scan(
    ctx: NodeContext,
    body: onnx.GraphProto,
    states: list[Value],
    scans: list[Value],
    axes: list[int],
    reverse: list[int],
    length: int,
) -> tuple[list[Value], list[list[Value]]]:
    """The body imported ``length`` times: the final states and each scan output's steps."""
    k = len(body.output) - len(states)
    if k < 0:
        raise ctx.refuse(f"the body returns {len(body.output)} values, fewer than the {len(states)} states")
    per_step: list[list[Value]] = [[] for _ in range(k)]
    for t in range(length):
        slices = [
            _take(ctx, x, axis, length - 1 - t if backward else t)
            for x, axis, backward in zip(scans, axes, reverse, strict=True)
        ]
        outputs = ctx.scope.import_graph(body, [*states, *slices])
        states = outputs[: len(states)]
        for j in range(k):
            per_step[j].append(outputs[len(states) + j])
    return states, per_step


@importer("Scan")
def _scan(ctx: NodeContext) -> list[Value]:
    """Unrolled over the static scan length: states carried, scan outputs stacked."""
    body = _body(ctx)
    m = int(ctx.required_attr("num_scan_inputs"))
    if not 0 < m <= len(ctx.proto.input) - (ctx.opset < 9):  # Scan-8's first input is sequence_lens
        raise ctx.refuse(f"num_scan_inputs = {m} must be at least 1 and at most the number of inputs")
    if ctx.opset < 9:
        return _scan8(ctx, body, m)
    values = [ctx.value(i) for i in range(len(ctx.proto.input))]
    states, scans = values[: len(values) - m], values[len(values) - m :]
    ranks = [len(_shape(v)) for v in scans]
    given = ctx.ints_attr("scan_input_axes", 0, m, "scan input")
    what = f"attribute 'scan_input_axes' = {given}: axis"
    in_axes = [ctx.axis(a, r, what) for a, r in zip(given, ranks, strict=True)]
    in_reverse = list(ctx.attr("scan_input_directions", [0] * m))
    length = _shape(scans[0])[in_axes[0]]
    states, per_step = _unroll_scan(ctx, body, states, scans, in_axes, in_reverse, length)
    k = len(per_step)
    out_axes = list(ctx.attr("scan_output_axes", [0] * k))
    out_reverse = list(ctx.attr("scan_output_directions", [0] * k))
    stacked = [
        _stack(ctx, steps[::-1] if reverse else steps, axis, "scan_out")
        for steps, axis, reverse in zip(per_step, out_axes, out_reverse, strict=True)
    ]
    return [*states, *stacked]


def _scan8(ctx: NodeContext, body: onnx.GraphProto, m: int) -> list[Value]:
    """Scan-8: every input has a batch axis 0 and scan inputs a sequence axis 1.

    Each batch row is scanned on its own for its ``sequence_lens`` steps (a load-time
    value); scan outputs are padded with zeros to the longest sequence, as onnxruntime does.
    """
    values = [ctx.value(i) for i in range(1, len(ctx.proto.input))]
    states, scans = values[: len(values) - m], values[len(values) - m :]
    shapes = [_shape(v) for v in values]
    if any(len(s) < 1 for s in shapes) or any(len(_shape(x)) < 2 for x in scans):
        raise ctx.refuse(f"Scan-8 needs a batch axis on all inputs, a sequence axis on scan inputs: {shapes}")
    batch, longest = _shape(scans[0])[:2]
    if any(s[0] != batch for s in shapes) or any(_shape(x)[1] != longest for x in scans):
        raise ctx.refuse(f"inputs disagree on the batch size or the sequence length: {shapes}")
    lengths = ctx.ints(0, "sequence_lens") if ctx.has(0) else [longest] * batch
    if len(lengths) != batch or any(not 0 < n <= longest for n in lengths):
        raise ctx.refuse(f"sequence_lens {lengths} must hold {batch} lengths in 1..{longest}")
    reverse = list(ctx.attr("directions", [0] * m))
    if len(reverse) != m:
        raise ctx.refuse(f"directions {reverse} must give one direction per scan input ({m})")
    finals: list[list[Value]] = []
    outputs: list[list[Value]] = []
    for row, length in enumerate(lengths):
        row_states = [_take(ctx, s, 0, row) for s in states]
        row_scans = [_take(ctx, x, 0, row) for x in scans]
        final, per_step = _unroll_scan(ctx, body, row_states, row_scans, [0] * m, reverse, length)
        finals.append(final)
        outputs.append([_stack(ctx, _padded(steps, longest), 0, "scan_out") for steps in per_step])
    states_out = [_stack(ctx, [f[i] for f in finals], 0, "scan_state") for i in range(len(states))]
    scans_out = [_stack(ctx, [o[j] for o in outputs], 0, "scan_out") for j in range(len(outputs[0]))]
    return [*states_out, *scans_out]


def _padded(steps: list[Value], length: int) -> list[Value]:
    """``steps`` followed by zero steps up to ``length``."""
    last = steps[-1]
    dtype = last.dtype if isinstance(last, np.ndarray) else last.type.dtype
    return steps + [np.zeros(_shape(last), dtype)] * (length - len(steps))


def _load_time(ctx: NodeContext, value: Value, name: str, what: str) -> np.ndarray:
    """A body output glow needs while unrolling (the loop condition), or LoadTimeValueError."""
    if isinstance(value, np.ndarray):
        return value
    known = ctx.scope.known_value(name)
    if known is not None:
        return known
    raise LoadTimeValueError(
        f"ONNX node {ctx.name!r} ({ctx.op_type}): {what} is computed at run time (data-dependent "
        "iteration); run the model with glow_core.load(...), which computes it for each call, "
        "or export the loop with a static trip count",
        sorted(ctx.scope.inputs_behind(name)),
    )


@importer("Loop")
def _loop(ctx: NodeContext) -> list[AnyValue]:
    """Unrolled while the trip count and every iteration's condition are known at load time."""
    body = _body(ctx)
    trip = ctx.int_scalar(0, "trip count M") if ctx.has(0) else None
    running = bool(ctx.scalar(1, "condition")) if ctx.has(1) else True
    if trip is None and not ctx.has(1):
        raise ctx.refuse("a Loop with neither trip count nor condition never ends")
    carried = [ctx.value(i) for i in range(2, len(ctx.proto.input))]
    k = len(body.output) - 1 - len(carried)
    per_step: list[list[AnyValue]] = [[] for _ in range(k)]
    i = 0
    while running and (trip is None or i < trip):
        if i >= MAX_UNROLL:
            raise ctx.refuse(f"the loop runs more than {MAX_UNROLL} iterations; glow unrolls loops")
        inputs = [np.array(i, np.int64), np.array(running), *carried]
        outputs = ctx.scope.import_graph(body, inputs)
        condition = _load_time(ctx, outputs[0], body.output[0].name, "the loop condition")
        running = bool(np.asarray(condition).reshape(-1)[0])
        carried = outputs[1 : 1 + len(carried)]
        for j in range(k):
            per_step[j].append(outputs[1 + len(carried) + j])
        i += 1
    if k and i == 0:
        raise ctx.refuse("the loop runs zero times, so its scan outputs have no known shape")
    return [*carried, *(_stack(ctx, steps, 0, "loop_out") for steps in per_step)]
