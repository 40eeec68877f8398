"""Importers for the recurrent layers LSTM, GRU and RNN: each becomes one node of the same
name (glow_core.graph.nodes.recurrent), which holds the unrolled lowering.

The importer checks the inputs against the dims ONNX gives them, fills absent optional
inputs with what ONNX means by their absence (zero biases, states and peepholes; full
sequence lengths), and slices the node's packed result into Y, Y_h and Y_c.
"""

from __future__ import annotations

from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.node import Node
from glow_core.graph.nodes.recurrent import (
    DEFAULT_ACTIVATIONS,
    DIRECTIONS,
    GATES,
    canonical_activation,
    recurrent_outputs,
)
from glow_core.types import ElemKind


def _check_operands(ctx: NodeContext, seq_batch: tuple[int, int], dirs: int, hidden: int) -> None:
    """Every weight, bias and state has the shape ONNX gives it for these dims: importing
    slices them per direction and gate, so a mismatch must be refused first."""
    gates = GATES[ctx.op_type] * hidden
    _, batch = seq_batch
    ctx.check_shape(1, (dirs, gates, ctx.shape(0)[2]), "W")
    ctx.check_shape(2, (dirs, gates, hidden), "R")
    ctx.check_shape(3, (dirs, 2 * gates), "B")
    ctx.check_shape(4, (batch,), "sequence_lens")
    state = (batch, dirs, hidden) if ctx.attr("layout", 0) else (dirs, batch, hidden)
    ctx.check_shape(5, state, "initial_h")
    if ctx.op_type == "LSTM":
        ctx.check_shape(6, state, "initial_c")
        ctx.check_shape(7, (dirs, 3 * hidden), "P")


def _activation_attrs(ctx: NodeContext, dirs: int) -> dict[str, tuple]:
    """The activation attributes as given, refused here (by ONNX's names) when wrong."""
    per = len(DEFAULT_ACTIVATIONS[ctx.op_type])
    names = tuple(ctx.attr("activations", ()))
    if names and len(names) != per * dirs:
        raise ctx.invalid(
            f"attribute 'activations' = {list(names)} has {len(names)} names, but {ctx.op_type} takes "
            f"{per} per direction ({dirs} direction{'s' if dirs > 1 else ''})"
        )
    for name in names:
        if canonical_activation(name) is None:
            raise ctx.refuse(f"activation {name!r} is not an ONNX RNN activation")
    return {
        "activations": names,
        "activation_alpha": tuple(float(a) for a in ctx.attr("activation_alpha", ())),
        "activation_beta": tuple(float(v) for v in ctx.attr("activation_beta", ())),
    }


def _optional(ctx: NodeContext, index: int, shape: tuple[int, ...], fill: float | int, like: Node) -> Node:
    """Input ``index``, or ``fill`` in the shape ONNX gives it when the model leaves it out."""
    if ctx.has(index):
        return ctx.node(index)
    elem = ElemKind.int32 if isinstance(fill, int) else like.type.elem
    return ctx.b.splat(fill, like.type.with_shape(shape).with_elem(elem))


@importer("LSTM", "GRU", "RNN", ranks={0: 3, 1: 3, 2: 3, 3: 2, 4: 1, 5: 3, 6: 3, 7: 2})
def _recurrent(ctx: NodeContext) -> list[Node | None]:
    op, x = ctx.op_type, ctx.node(0)
    layout = ctx.flag_attr("layout", 0)
    seq, batch, _ = x.type.shape if not layout else (x.type.shape[1], x.type.shape[0], x.type.shape[2])
    hidden = ctx.int_attr("hidden_size", ctx.shape(2)[-1], low=1)
    direction = ctx.attr("direction", "forward")
    if direction not in DIRECTIONS:
        raise ctx.refuse(f"direction {direction!r} is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    _check_operands(ctx, (seq, batch), dirs, hidden)
    gates = GATES[op] * hidden
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    operands = [
        x,
        ctx.node(1),
        ctx.node(2),
        _optional(ctx, 3, (dirs, 2 * gates), 0.0, x),
        _optional(ctx, 4, (batch,), seq, x),
        _optional(ctx, 5, state, 0.0, x),
    ]
    attrs: dict = {"direction": direction, "layout": int(layout), **_activation_attrs(ctx, dirs)}
    if ctx.attr("clip") is not None:
        attrs["clip"] = float(ctx.attr("clip"))
    if op == "LSTM":
        operands += [_optional(ctx, 6, state, 0.0, x), _optional(ctx, 7, (dirs, 3 * hidden), 0.0, x)]
        attrs["input_forget"] = int(ctx.flag_attr("input_forget", 0))
    if op == "GRU":
        attrs["linear_before_reset"] = int(ctx.flag_attr("linear_before_reset", 0))
    packed = ctx.b.create(op, *operands, name=ctx.name, **attrs)
    outputs: list[Node | None] = list(recurrent_outputs(ctx.b, packed, int(layout), seq))
    return outputs + [None] * (3 - len(outputs))
