"""Importers for the recurrent layers LSTM, GRU and RNN, unrolled over the static sequence.

The input projection of every time step is one MatMul up front; each step then adds the
recurrent projection, applies the gate activations and updates the state. Variable
``sequence_lens`` freeze the state (and zero the output) past each sequence's end through
Select; the reverse direction runs forward over each sequence reversed within its length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.ops_activation import softplus
from glow_core.frontends.onnx.ops_index import iota
from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind

Activation = Callable[[Builder, Node], Node]

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    """An ONNX RNN activation by name, with its alpha/beta (ONNX defaults when not given)."""

    def scaled(b: Builder, x: Node, factor: float) -> Node:
        return b.Mul(x, b.splat(factor, x))

    table: dict[str, Activation] = {
        "Sigmoid": lambda b, x: b.Sigmoid(x),
        "Tanh": lambda b, x: b.Tanh(x),
        "Relu": lambda b, x: b.Relu(x),
        "Affine": lambda b, x: b.Add(
            scaled(b, x, alpha if alpha is not None else 1.0), b.splat(beta or 0.0, x)
        ),
        "LeakyRelu": lambda b, x: b.LeakyRelu(x, alpha=alpha if alpha is not None else 0.01),
        "ScaledTanh": lambda b, x: scaled(
            b, b.Tanh(scaled(b, x, beta if beta is not None else 1.0)), alpha or 1.0
        ),
        "HardSigmoid": lambda b, x: b.Clip(
            b.Add(
                scaled(b, x, alpha if alpha is not None else 0.2), b.splat(0.5 if beta is None else beta, x)
            ),
            low=0.0,
            high=1.0,
        ),
        "Softsign": lambda b, x: b.Div(x, b.Add(b.splat(1.0, x), build.absolute(b, x))),
        "Softplus": softplus,
    }
    key = next((k for k in table if k.lower() == name.lower()), None)
    if key is None:
        raise KeyError(name)
    return table[key]


@dataclass
class _Cell:
    """One direction's weights (already transposed for x @ W) and settings."""

    op: str
    hidden: int
    w: Node  # [I, G*H]
    r: Node  # [H, G*H]
    bias_w: Node | None  # [G*H]
    bias_r: Node | None  # [G*H]
    peephole: Node | None  # [3H] (LSTM)
    acts: list[Activation]
    clip: float | None
    linear_before_reset: bool
    input_forget: bool


def _gate(b: Builder, x: Node, index: int, hidden: int) -> Node:
    batch = x.type.shape[0]
    return b.Slice(x, starts=(0, index * hidden), ends=(batch, (index + 1) * hidden))


def _clipped(b: Builder, cell: _Cell, x: Node) -> Node:
    return x if cell.clip is None else b.Clip(x, low=-cell.clip, high=cell.clip)


def _step(b: Builder, cell: _Cell, xw: Node, h: Node, c: Node | None) -> tuple[Node, Node | None]:
    """One time step: the new hidden state (and cell state for LSTM)."""
    hw = b.MatMul(h, cell.r)  # LSTM and RNN biases were folded into the input projection
    n = cell.hidden
    f, g = cell.acts[0], cell.acts[1] if len(cell.acts) > 1 else None
    if cell.op == "RNN":
        return f(b, _clipped(b, cell, b.Add(xw, hw))), None
    if cell.op == "GRU":
        return _gru_step(b, cell, xw, hw, h), None
    pre = b.Add(xw, hw)
    peep = cell.peephole
    i_pre, o_pre, f_pre, c_pre = (_gate(b, pre, k, n) for k in range(4))
    if peep is not None:
        i_pre = b.add(i_pre, b.mul(b.Slice(peep, starts=(0,), ends=(n,)), c))
        f_pre = b.add(f_pre, b.mul(b.Slice(peep, starts=(2 * n,), ends=(3 * n,)), c))
    i = f(b, _clipped(b, cell, i_pre))
    forget = b.Sub(b.splat(1.0, i), i) if cell.input_forget else f(b, _clipped(b, cell, f_pre))
    candidate = g(b, _clipped(b, cell, c_pre))  # type: ignore[misc]
    c_new = b.Add(b.Mul(forget, c), b.Mul(i, candidate))
    if peep is not None:
        o_pre = b.add(o_pre, b.mul(b.Slice(peep, starts=(n,), ends=(2 * n,)), c_new))
    o = f(b, _clipped(b, cell, o_pre))
    return b.Mul(o, cell.acts[2](b, c_new)), c_new


def _gru_step(b: Builder, cell: _Cell, xw: Node, hw: Node, h: Node) -> Node:
    """GRU; with linear_before_reset the candidate's recurrent bias sits inside the reset product."""
    n, f, g = cell.hidden, cell.acts[0], cell.acts[1]
    if cell.bias_r is not None:
        hw = b.add(hw, cell.bias_r)
    z = f(b, _clipped(b, cell, b.Add(_gate(b, xw, 0, n), _gate(b, hw, 0, n))))
    r = f(b, _clipped(b, cell, b.Add(_gate(b, xw, 1, n), _gate(b, hw, 1, n))))
    if cell.linear_before_reset:
        recurrent = b.Mul(r, _gate(b, hw, 2, n))
    else:
        rh = b.Mul(r, h)
        r_h = b.Slice(cell.r, starts=(0, 2 * n), ends=(n, 3 * n))
        recurrent = b.MatMul(rh, r_h)
        if cell.bias_r is not None:
            recurrent = b.add(recurrent, b.Slice(cell.bias_r, starts=(2 * n,), ends=(3 * n,)))
    candidate = g(b, _clipped(b, cell, b.Add(_gate(b, xw, 2, n), recurrent)))
    keep = b.Mul(z, h)
    return b.Add(b.Mul(b.Sub(b.splat(1.0, z), z), candidate), keep)


def _direction_matrix(ctx: NodeContext, index: int, d: int) -> Node:
    """W[d] or R[d] transposed to [in, G*H] (at load time when the weights are constant)."""
    if ctx.is_static(index):
        return ctx.constant(np.ascontiguousarray(ctx.static(index, "weights")[d].T), f"w{index}_{d}")
    w = ctx.node(index)
    _, rows, cols = w.type.shape
    one = ctx.b.Reshape(ctx.b.Slice(w, starts=(d, 0, 0), ends=(d + 1, rows, cols)), shape=(rows, cols))
    return ctx.b.Transpose(one, shuffle=(1, 0))


def _direction_row(ctx: NodeContext, index: int, d: int, start: int, stop: int) -> Node | None:
    """Columns [start, stop) of row ``d`` of an optional [dirs, N] input (biases, peepholes)."""
    if not ctx.has(index):
        return None
    v = ctx.node(index)
    return ctx.b.Reshape(ctx.b.Slice(v, starts=(d, start), ends=(d + 1, stop)), shape=(stop - start,))


def _initial_state(ctx: NodeContext, index: int, d: int, batch: int, hidden: int, like: Node) -> Node:
    """initial_h/initial_c of direction ``d`` as [batch, H], zeros when absent."""
    if not ctx.has(index):
        return ctx.b.splat(0.0, like.type.with_shape((batch, hidden)))
    v = ctx.node(index)
    if ctx.attr("layout", 0):  # [batch, dirs, H]
        v = ctx.b.Transpose(v, shuffle=(1, 0, 2))
    return ctx.b.Reshape(ctx.b.Slice(v, starts=(d, 0, 0), ends=(d + 1, batch, hidden)), shape=(batch, hidden))


def _cell(ctx: NodeContext, d: int, acts: list[Activation], hidden: int) -> _Cell:
    g = _GATES[ctx.op_type] * hidden
    bias_w, bias_r = _direction_row(ctx, 3, d, 0, g), _direction_row(ctx, 3, d, g, 2 * g)
    if ctx.op_type != "GRU" and bias_w is not None and bias_r is not None:
        bias_w, bias_r = ctx.b.Add(bias_w, bias_r), None  # one bias, added to the input projection
    clip = ctx.attr("clip")
    return _Cell(
        op=ctx.op_type,
        hidden=hidden,
        w=_direction_matrix(ctx, 1, d),
        r=_direction_matrix(ctx, 2, d),
        bias_w=bias_w,
        bias_r=bias_r,
        peephole=_direction_row(ctx, 7, d, 0, 3 * hidden) if ctx.op_type == "LSTM" else None,
        acts=acts,
        clip=float(clip) if clip is not None else None,
        linear_before_reset=bool(ctx.attr("linear_before_reset", 0)),
        input_forget=bool(ctx.attr("input_forget", 0)),
    )


def _activations(ctx: NodeContext, dirs: int) -> list[list[Activation]]:
    per = len(_DEFAULT_ACTIVATIONS[ctx.op_type])
    names = list(ctx.attr("activations", _DEFAULT_ACTIVATIONS[ctx.op_type] * dirs))
    if len(names) != per * dirs:
        raise ctx.invalid(
            f"attribute 'activations' = {names} has {len(names)} names, but {ctx.op_type} takes "
            f"{per} per direction ({dirs} direction{'s' if dirs > 1 else ''})"
        )
    alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
    try:
        acts = [
            _activation(n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
            for i, n in enumerate(names)
        ]
    except KeyError as err:
        raise ctx.refuse(f"activation {err.args[0]!r} is not an ONNX RNN activation") from None
    return [acts[d * per : (d + 1) * per] for d in range(dirs)]


def _step_masks(b: Builder, lengths: Node | None, seq: int, batch: int, hidden: int) -> list[Node | None]:
    """Per time step, a [batch, H] bool "still inside the sequence" (None: every sequence is full)."""
    if lengths is None:
        return [None] * seq
    per_batch = b.Reshape(lengths, shape=(batch, 1))
    masks: list[Node | None] = []
    for t in range(seq):
        inside = b.Compare(b.splat(t, per_batch), per_batch, predicate="lt")
        masks.append(b.Broadcast(inside, shape=(batch, hidden)))
    return masks


def _reverse_in_length(b: Builder, x: Node, lengths: Node | None) -> Node:
    """Each sequence of [seq, batch, ...] reversed within its own length (all of it without lengths)."""
    seq = x.type.shape[0]
    if lengths is None:
        return b.Slice(
            x,
            starts=(seq - 1,) + (0,) * (x.type.rank - 1),
            ends=(-1, *x.type.shape[1:]),
            steps=(-1,) + (1,) * (x.type.rank - 1),
        )
    shape = x.type.shape[:2]
    per_batch = b.Reshape(lengths, shape=(1, shape[1]))
    t = build.constant(b, iota(shape, 0), "time")
    flipped = b.sub(b.sub(per_batch, b.splat(1, per_batch)), t)
    time = build.select(b, build.compare(b, t, per_batch, "lt"), flipped, b.broadcast_to(t, shape))
    tail = (1,) * (x.type.rank - 2)
    coords = [b.reshape(time, shape + tail), iota(x.type.shape, 1)] + [
        iota(x.type.shape, a) for a in range(2, x.type.rank)
    ]
    return b.reshape(build.gather_at(b, x, coords), x.type.shape)


def _run_direction(
    b: Builder, cell: _Cell, x: Node, state: tuple[Node, Node | None], masks: list[Node | None]
) -> tuple[list[Node], Node, Node | None]:
    """Unroll one direction over ``x`` [seq, batch, I]: per-step outputs and the final states."""
    seq, batch, width = x.type.shape
    projected = b.MatMul(b.Reshape(x, shape=(seq * batch, width)), cell.w)
    if cell.bias_w is not None:
        projected = b.add(projected, cell.bias_w)
    gates = projected.type.shape[1]
    projected = b.Reshape(projected, shape=(seq, batch, gates))
    h, c = state
    outputs = []
    for t in range(seq):
        xw = b.Reshape(b.Slice(projected, starts=(t, 0, 0), ends=(t + 1, batch, gates)), shape=(batch, gates))
        h_new, c_new = _step(b, cell, xw, h, c)
        mask = masks[t]
        if mask is not None:
            h_new = b.Select(mask, h_new, h)
            c_new = b.Select(mask, c_new, c) if c is not None and c_new is not None else c_new
            outputs.append(b.Select(mask, h_new, b.splat(0.0, h_new)))
        else:
            outputs.append(h_new)
        h, c = h_new, c_new
    return outputs, h, c


def _check_operands(ctx: NodeContext, seq_batch: tuple[int, int], dirs: int, hidden: int) -> None:
    """Every weight, bias and state has the shape ONNX gives it for these dims: importing
    slices them per direction and gate, so a mismatch must be refused first."""
    gates = _GATES[ctx.op_type] * hidden
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


@importer("LSTM", "GRU", "RNN", ranks={0: 3, 1: 3, 2: 3, 3: 2, 4: 1, 5: 3, 6: 3, 7: 2})
def _recurrent(ctx: NodeContext) -> list[Node | None]:
    b, op = ctx.b, ctx.op_type
    x = ctx.node(0)
    layout = int(ctx.attr("layout", 0))
    if layout:
        x = b.Transpose(x, shuffle=(1, 0, 2))
    seq, batch, _ = x.type.shape
    hidden = ctx.int_attr("hidden_size", ctx.shape(2)[-1], low=1)
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.refuse(f"direction {direction!r} is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    _check_operands(ctx, (seq, batch), dirs, hidden)
    lengths = build.convert(b, ctx.node(4), ElemKind.int64) if ctx.has(4) else None
    if lengths is not None and ctx.is_static(4) and bool(np.all(ctx.static(4, "sequence_lens") == seq)):
        lengths = None  # every sequence is full: no masking
    masks = _step_masks(b, lengths, seq, batch, hidden)
    ys, hs, cs = [], [], []
    for d, acts in enumerate(_activations(ctx, dirs)):
        cell = _cell(ctx, d, acts, hidden)
        h0 = _initial_state(ctx, 5, d, batch, hidden, x)
        c0 = _initial_state(ctx, 6, d, batch, hidden, x) if op == "LSTM" else None
        backward = direction == "reverse" or d == 1
        source = _reverse_in_length(b, x, lengths) if backward else x
        outputs, h, c = _run_direction(b, cell, source, (h0, c0), masks)
        y = b.Concat(*(b.Reshape(o, shape=(1, batch, hidden)) for o in outputs), axis=0)
        y = _reverse_in_length(b, y, lengths) if backward else y
        ys.append(b.Reshape(y, shape=(seq, 1, batch, hidden)))
        hs.append(b.Reshape(h, shape=(1, batch, hidden)))
        if c is not None:
            cs.append(b.Reshape(c, shape=(1, batch, hidden)))
    y_all = ys[0] if dirs == 1 else b.Concat(*ys, axis=1)
    y_h = hs[0] if dirs == 1 else b.Concat(*hs, axis=0)
    y_c = (cs[0] if dirs == 1 else b.Concat(*cs, axis=0)) if cs else None
    if layout:
        y_all = b.Transpose(y_all, shuffle=(2, 0, 1, 3))
        y_h = b.Transpose(y_h, shuffle=(1, 0, 2))
        y_c = b.Transpose(y_c, shuffle=(1, 0, 2)) if y_c is not None else None
    return [y_all, y_h, y_c]
