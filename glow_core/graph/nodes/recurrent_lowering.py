"""The recurrent layers' lowering: every direction unrolled over the static sequence.

One time step is one function (``_step``): a backend that runs a kept recurrence as a loop
needs exactly what that function reads, which is the node's operands and attributes
(``recurrent.py`` describes them and the packed result this builds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glow_core.graph.nodes.indexing import exact_constant, gather_at, iota
from glow_core.graph.nodes.known import filled_with
from glow_core.graph.nodes.recurrent_cells import GATES, Activation, activation_plan
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type


@dataclass
class _Cell:
    """One direction's weights (transposed for x @ W) and settings: what one step reads."""

    op: str
    hidden: int
    w: Node  # [I, G*H]
    r: Node  # [H, G*H]
    bias_w: Node | None  # [G*H]: LSTM and RNN fold R's bias in here
    bias_r: Node | None  # [G*H]: GRU only
    peephole: Node | None  # [3H]: LSTM's i, o, f
    acts: list[Activation]
    clip: float
    linear_before_reset: bool
    input_forget: bool


def _row(b: Builder, v: Node, d: int, start: int, stop: int) -> Node:
    """Columns [start, stop) of row ``d`` of a [dirs, N] operand."""
    return b.Reshape(b.Slice(v, starts=(d, start), ends=(d + 1, stop)), shape=(stop - start,))


def _matrix(b: Builder, m: Node, d: int) -> Node:
    """W[d] or R[d] transposed to [in, G*H] (folded at compile time for constant weights)."""
    _, rows, cols = m.type.shape
    one = b.Reshape(b.Slice(m, starts=(d, 0, 0), ends=(d + 1, rows, cols)), shape=(rows, cols))
    return b.Transpose(one, shuffle=(1, 0))


def _cell(
    b: Builder, op: str, d: int, ops: dict[str, Node], attrs: dict[str, Any], acts: list[Activation]
) -> _Cell:
    hidden = ops["recurrence"].type.shape[2]
    g = GATES[op] * hidden
    bias_w = bias_r = peephole = None
    if not filled_with(ops["bias"], 0.0):
        bias_w, bias_r = _row(b, ops["bias"], d, 0, g), _row(b, ops["bias"], d, g, 2 * g)
        if op != "GRU":
            bias_w, bias_r = b.Add(bias_w, bias_r), None  # one bias, added to the input projection
    if op == "LSTM" and not filled_with(ops["peephole"], 0.0):
        peephole = _row(b, ops["peephole"], d, 0, 3 * hidden)
    return _Cell(
        op=op,
        hidden=hidden,
        w=_matrix(b, ops["weights"], d),
        r=_matrix(b, ops["recurrence"], d),
        bias_w=bias_w,
        bias_r=bias_r,
        peephole=peephole,
        acts=acts,
        clip=attrs["clip"],
        linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
        input_forget=bool(attrs.get("input_forget", 0)),
    )


def _gate(b: Builder, x: Node, index: int, hidden: int) -> Node:
    batch = x.type.shape[0]
    return b.Slice(x, starts=(0, index * hidden), ends=(batch, (index + 1) * hidden))


def _clipped(b: Builder, cell: _Cell, x: Node) -> Node:
    return x if math.isinf(cell.clip) else b.Clip(x, low=-cell.clip, high=cell.clip)


def _step(b: Builder, cell: _Cell, xw: Node, h: Node, c: Node | None) -> tuple[Node, Node | None]:
    """One time step from the projected input ``xw`` [batch, G*H] and the states: the new
    hidden state (and cell state for LSTM)."""
    hw = b.MatMul(h, cell.r)  # LSTM and RNN biases were folded into the input projection
    n = cell.hidden
    f, g = cell.acts[0], cell.acts[1] if len(cell.acts) > 1 else None
    if cell.op == "RNN":
        return f(b, _clipped(b, cell, b.Add(xw, hw))), None
    if cell.op == "GRU":
        return _gru_step(b, cell, xw, hw, h), None
    assert c is not None and g is not None
    pre = b.Add(xw, hw)
    peep = cell.peephole
    i_pre, o_pre, f_pre, c_pre = (_gate(b, pre, k, n) for k in range(4))
    if peep is not None:
        i_pre = b.add(i_pre, b.mul(b.Slice(peep, starts=(0,), ends=(n,)), c))
        f_pre = b.add(f_pre, b.mul(b.Slice(peep, starts=(2 * n,), ends=(3 * n,)), c))
    i = f(b, _clipped(b, cell, i_pre))
    forget = b.Sub(b.splat(1.0, i), i) if cell.input_forget else f(b, _clipped(b, cell, f_pre))
    candidate = g(b, _clipped(b, cell, c_pre))
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


def _initial_state(b: Builder, state: Node, d: int, layout: int, like: Type) -> Node:
    """initial_h/initial_c of direction ``d`` as [batch, H] (a zero splat when absent)."""
    if filled_with(state, 0.0):
        return b.splat(0.0, like)
    if layout:  # [batch, dirs, H]
        state = b.Transpose(state, shuffle=(1, 0, 2))
    batch, hidden = like.shape
    return b.Reshape(b.Slice(state, starts=(d, 0, 0), ends=(d + 1, batch, hidden)), shape=(batch, hidden))


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
    t = exact_constant(b, iota(shape, 0), "time")
    flipped = b.sub(b.sub(per_batch, b.splat(1, per_batch)), t)
    inside = b.Compare(b.broadcast_to(t, shape), b.broadcast_to(per_batch, shape), predicate="lt")
    time = b.Select(inside, b.broadcast_to(flipped, shape), b.broadcast_to(t, shape))
    tail = (1,) * (x.type.rank - 2)
    coords = [b.reshape(time, shape + tail), iota(x.type.shape, 1)] + [
        iota(x.type.shape, a) for a in range(2, x.type.rank)
    ]
    return b.reshape(gather_at(b, x, coords), x.type.shape)


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


def lower_recurrent(b: Builder, op: str, ops: dict[str, Node], attrs: dict[str, Any]) -> Node:
    """The whole layer: every direction unrolled, outputs and final states packed."""
    layout, direction = attrs["layout"], attrs["direction"]
    x = ops["input"] if layout == 0 else b.Transpose(ops["input"], shuffle=(1, 0, 2))
    seq, batch, _ = x.type.shape
    dirs, _, hidden = ops["recurrence"].type.shape
    lengths = None if filled_with(ops["lengths"], seq) else ops["lengths"]
    if lengths is not None and lengths.type.elem is not ElemKind.int64:
        lengths = b.Convert(lengths, elem=ElemKind.int64.name)
    masks = _step_masks(b, lengths, seq, batch, hidden)
    state_type = x.type.with_shape((batch, hidden))
    ys, hs, cs = [], [], []
    for d, acts in enumerate(activation_plan(op, dirs, attrs)):
        cell = _cell(b, op, d, ops, attrs, acts)
        h0 = _initial_state(b, ops["initial_h"], d, layout, state_type)
        c0 = _initial_state(b, ops["initial_c"], d, layout, state_type) if op == "LSTM" else None
        backward = direction == "reverse" or d == 1
        source = _reverse_in_length(b, x, lengths) if backward else x
        outputs, h, c = _run_direction(b, cell, source, (h0, c0), masks)
        y = b.Concat(*(b.Reshape(o, shape=(1, batch, hidden)) for o in outputs), axis=0)
        y = _reverse_in_length(b, y, lengths) if backward else y
        ys.append(b.Reshape(y, shape=(seq, 1, batch, hidden)))
        hs.append(b.Reshape(h, shape=(1, 1, batch, hidden)))
        if c is not None:
            cs.append(b.Reshape(c, shape=(1, 1, batch, hidden)))
    steps = [ys, hs] + ([cs] if cs else [])
    packed = [part[0] if dirs == 1 else b.Concat(*part, axis=1) for part in steps]
    result = b.Concat(*packed, axis=0)  # [seq + extra, dirs, batch, H]
    return result if layout == 0 else b.Transpose(result, shuffle=(2, 0, 1, 3))
