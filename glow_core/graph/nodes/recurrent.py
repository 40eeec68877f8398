"""Recurrent layers: LSTM, GRU and RNN, as ONNX defines them, unrolled over the static sequence.

Operands keep ONNX's layout, so a backend that keeps a recurrence gets the weights it was
exported with: ``weights`` W [dirs, G*H, I], ``recurrence`` R [dirs, G*H, H], ``bias``
[dirs, 2*G*H] (W's then R's), ``lengths`` [batch], ``initial_h``/``initial_c`` [dirs, batch, H]
([batch, dirs, H] with ``layout`` 1) and LSTM's ``peephole`` [dirs, 3H]; G is the number of
gates (LSTM 4: i o f c, GRU 3: z r h, RNN 1). Absent ONNX inputs arrive as zeros (lengths:
the full sequence); the lowering recognizes such constants (``known.filled_with``) and
builds nothing for them.

A node has one result, so the recurrence's three ONNX outputs travel as one tensor: Y with
the final hidden state (and, for LSTM, the final cell state) appended as extra steps along
the sequence axis: [seq + 2, dirs, batch, H] for LSTM ([batch, seq + 2, dirs, H] with layout
1); GRU and RNN append one step. ``recurrent_outputs`` slices them apart again.

The lowering keeps one time step in one function (``_step``): a backend that runs a kept
recurrence as a loop needs exactly what that function reads, which is all named above.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from glow_core.graph.nodes.activation import softplus
from glow_core.graph.nodes.indexing import exact_constant, gather_at, iota
from glow_core.graph.nodes.known import filled_with
from glow_core.spec import Attr, In, ex, expect, node, random_tensor
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
"""Gates per cell: how many H-wide blocks W, R and each half of B hold."""

DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
"""ONNX's activations for one direction: f, g (and h for LSTM)."""

DIRECTIONS = ("forward", "reverse", "bidirectional")

ACTIVATION_DEFAULTS: dict[str, tuple[float, float]] = {
    "Sigmoid": (0.0, 0.0),
    "Tanh": (0.0, 0.0),
    "Relu": (0.0, 0.0),
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01, 0.0),
    "ScaledTanh": (1.0, 1.0),
    "HardSigmoid": (0.2, 0.5),
    "Softsign": (0.0, 0.0),
    "Softplus": (0.0, 0.0),
}
"""Every ONNX recurrent activation with its (alpha, beta) when the model gives none; the
activations that take no parameter ignore theirs."""

Activation = Callable[["Builder", "Node"], "Node"]


def canonical_activation(name: str) -> str | None:
    """The activation's spelling in ``ACTIVATION_DEFAULTS`` (ONNX names are case-insensitive)."""
    return next((k for k in ACTIVATION_DEFAULTS if k.lower() == name.lower()), None)


def _activation(name: str, alpha: float, beta: float) -> Activation:
    """The activation ``name`` with its parameters, as a builder of primitives and nodes."""

    def scaled(b: Builder, x: Node, factor: float) -> Node:
        return b.Mul(x, b.splat(factor, x))

    def absolute(b: Builder, x: Node) -> Node:
        return b.Max(x, b.Sub(b.splat(0, x), x))

    table: dict[str, Activation] = {
        "Sigmoid": lambda b, x: b.Sigmoid(x),
        "Tanh": lambda b, x: b.Tanh(x),
        "Relu": lambda b, x: b.Relu(x),
        "Affine": lambda b, x: b.Add(scaled(b, x, alpha), b.splat(beta, x)),
        "LeakyRelu": lambda b, x: b.LeakyRelu(x, alpha=alpha),
        "ScaledTanh": lambda b, x: scaled(b, b.Tanh(scaled(b, x, beta)), alpha),
        "HardSigmoid": lambda b, x: b.Clip(b.Add(scaled(b, x, alpha), b.splat(beta, x)), low=0.0, high=1.0),
        "Softsign": lambda b, x: b.Div(x, b.Add(b.splat(1.0, x), absolute(b, x))),
        "Softplus": softplus,
    }
    return table[name]


def _activation_plan(op: str, dirs: int, attrs: dict[str, Any]) -> list[list[Activation]]:
    """Per direction, the cell's activations with their alpha/beta resolved (ONNX indexes
    ``activation_alpha``/``beta`` by the activation's position in the whole list)."""
    names = list(attrs["activations"]) or list(DEFAULT_ACTIVATIONS[op]) * dirs
    alphas, betas = attrs["activation_alpha"], attrs["activation_beta"]
    acts = []
    for i, given in enumerate(names):
        name = canonical_activation(given)
        assert name is not None  # the type rule refused unknown names
        alpha, beta = ACTIVATION_DEFAULTS[name]
        acts.append(
            _activation(name, alphas[i] if i < len(alphas) else alpha, betas[i] if i < len(betas) else beta)
        )
    per = len(DEFAULT_ACTIVATIONS[op])
    return [acts[d * per : (d + 1) * per] for d in range(dirs)]


# ---- type rule ---------------------------------------------------------------------------


def _recurrent_type(op: str, operands: dict[str, Type], attrs: dict[str, Any]) -> Type:
    """Check every operand against the dims ONNX gives it; the packed result type."""
    x, r = operands["input"], operands["recurrence"]
    direction, layout = attrs["direction"], attrs["layout"]
    expect(direction in DIRECTIONS, f"direction {direction!r} is not one of {DIRECTIONS}", x)
    expect(layout in (0, 1), f"layout {layout} is not 0 (sequence first) or 1 (batch first)", x)
    expect(x.rank == 3 and x.elem.is_float, "the input must be a 3-D float tensor", x)
    seq, batch = x.shape[:2] if layout == 0 else x.shape[1::-1]
    dirs = 2 if direction == "bidirectional" else 1
    expect(r.rank == 3 and r.shape[0] == dirs, f"recurrence must be [{dirs}, gates*H, H]", r)
    hidden = r.shape[2]
    gates = GATES[op] * hidden
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    shapes = {
        "weights": (dirs, gates, x.shape[2]),
        "recurrence": (dirs, gates, hidden),
        "bias": (dirs, 2 * gates),
        "initial_h": state,
        "initial_c": state,
        "peephole": (dirs, 3 * hidden),
    }
    for name, t in operands.items():
        if name in shapes:
            expect(t.shape == shapes[name], f"{name} must be {list(shapes[name])}", t, x)
            expect(t.elem == x.elem, f"{name} must have the input's element kind", t, x)
    lengths = operands["lengths"]
    expect(lengths.shape == (batch,), f"lengths must be [{batch}] (one per batch entry)", lengths, x)
    expect(lengths.elem in (ElemKind.int32, ElemKind.int64), "lengths must be int32 or int64", lengths)
    _check_activations(op, dirs, attrs, x)
    clip = attrs["clip"]
    expect(clip > 0, f"clip {clip} must be positive (inf: no clipping)", x)
    steps = seq + (2 if op == "LSTM" else 1)
    shape = (steps, dirs, batch, hidden) if layout == 0 else (batch, steps, dirs, hidden)
    return x.with_shape(shape)


def _check_activations(op: str, dirs: int, attrs: dict[str, Any], x: Type) -> None:
    names = attrs["activations"]
    per = len(DEFAULT_ACTIVATIONS[op])
    if names:
        count = f"{op} takes {per} activations per direction ({dirs} direction{'s' * (dirs > 1)})"
        expect(len(names) == per * dirs, f"activations {list(names)}: {count}", x)
    unknown = [n for n in names if canonical_activation(n) is None]
    expect(not unknown, f"{unknown} are not ONNX recurrent activations {list(ACTIVATION_DEFAULTS)}", x)
    for key in ("activation_alpha", "activation_beta"):
        values = attrs[key]
        expect(all(isinstance(v, int | float) for v in values), f"{key} must be numbers", x)
        expect(len(values) <= max(len(names), per * dirs), f"{key} has more entries than activations", x)


def _sample(rng: np.random.Generator, types: list[Type], layout: int) -> list[np.ndarray]:
    """Standard-normal tensors, and lengths drawn from 1 to the sequence length (lengths
    outside it are undefined in ONNX); the lengths operand is the fifth."""
    arrays = [random_tensor(rng, t) for t in types]
    x, lengths = types[0], types[4]
    seq = x.shape[0] if layout == 0 else x.shape[1]
    arrays[4] = rng.integers(1, seq + 1, lengths.shape).astype(lengths.dtype)
    return arrays


# ---- lowering ----------------------------------------------------------------------------


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


def _lower_recurrent(b: Builder, op: str, ops: dict[str, Node], attrs: dict[str, Any]) -> Node:
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
    for d, acts in enumerate(_activation_plan(op, dirs, attrs)):
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


def recurrent_outputs(b: Builder, packed: Node, layout: int, seq: int) -> list[Node]:
    """Y, Y_h (and Y_c for LSTM) in ONNX's shapes, sliced from a recurrent node's result."""
    axis = 0 if layout == 0 else 1
    shape = packed.type.shape
    outputs = []
    for start, stop in [(0, seq)] + [(s, s + 1) for s in range(seq, shape[axis])]:
        starts = tuple(start if i == axis else 0 for i in range(4))
        ends = tuple(stop if i == axis else n for i, n in enumerate(shape))
        part = b.Slice(packed, starts=starts, ends=ends)
        if start >= seq:  # a final state: the sequence axis goes
            part = b.Reshape(part, shape=shape[:axis] + shape[axis + 1 :])
        outputs.append(part)
    return outputs


# ---- declarations ------------------------------------------------------------------------

_DIRECTION_DOC = "forward, reverse or bidirectional"
_LAYOUT_DOC = "0: input [seq, batch, I]; 1: input [batch, seq, I] (states batch first too)"
_ACTIVATIONS_DOC = "per direction f, g (, h) by ONNX name; empty: ONNX's defaults"
_ALPHA_DOC = "by position in activations; missing: the activation's default"
_CLIP_DOC = "pre-activations are clipped to [-clip, clip]; inf: none"


@node
class LSTM:
    """ONNX LSTM: gates i, o, f, c with optional peepholes, clip, coupled input and forget
    gate; result Y then the final hidden and cell states along the sequence axis."""

    input = In()
    weights = In("W [dirs, 4H, I]")
    recurrence = In("R [dirs, 4H, H]")
    bias = In("B [dirs, 8H]: W's then R's (zeros when absent)")
    lengths = In("sequence_lens [batch] (the sequence length when absent)")
    initial_h = In("[dirs, batch, H] (zeros when absent)")
    initial_c = In("[dirs, batch, H] (zeros when absent)")
    peephole = In("P [dirs, 3H]: i, o, f (zeros when absent)")
    direction = Attr(str, "forward", _DIRECTION_DOC)
    layout = Attr(int, 0, _LAYOUT_DOC)
    activations = Attr(tuple, (), _ACTIVATIONS_DOC)
    activation_alpha = Attr(tuple, (), _ALPHA_DOC)
    activation_beta = Attr(tuple, (), _ALPHA_DOC)
    clip = Attr(float, math.inf, _CLIP_DOC)
    input_forget = Attr(int, 0, "1: the forget gate is 1 - input gate")
    examples = (
        ex(
            "f32[4,2,3]", "f32[1,20,3]", "f32[1,20,5]", "f32[1,40]",
            "i32[2]", "f32[1,2,5]", "f32[1,2,5]", "f32[1,15]",
        ),
        ex(
            "f32[2,3,4]", "f32[2,12,4]", "f32[2,12,3]", "f32[2,24]",
            "i32[2]", "f32[2,2,3]", "f32[2,2,3]", "f32[2,9]",
            direction="bidirectional", layout=1, clip=2.0, input_forget=1,
        ),
    )  # fmt: skip

    def sample(rng, input, weights, recurrence, bias, lengths, initial_h, initial_c, peephole, **attrs):
        types = [input, weights, recurrence, bias, lengths, initial_h, initial_c, peephole]
        return _sample(rng, types, attrs.get("layout", 0))

    def type(
        input, weights, recurrence, bias, lengths, initial_h, initial_c, peephole,
        direction, layout, activations, activation_alpha, activation_beta, clip, input_forget,
    ):  # fmt: skip
        operands = dict(locals())
        expect(input_forget in (0, 1), f"input_forget {input_forget} is not 0 or 1", input)
        return _recurrent_type("LSTM", _only(operands, LSTM), operands)

    def lower(
        b, input, weights, recurrence, bias, lengths, initial_h, initial_c, peephole,
        direction, layout, activations, activation_alpha, activation_beta, clip, input_forget,
    ):  # fmt: skip
        attrs = dict(locals())
        return _lower_recurrent(b, "LSTM", _only(attrs, LSTM), attrs)


@node
class GRU:
    """ONNX GRU: gates z, r, h, with the reset applied before or after the recurrent product
    (``linear_before_reset``); result Y then the final hidden state along the sequence axis."""

    input = In()
    weights = In("W [dirs, 3H, I]")
    recurrence = In("R [dirs, 3H, H]")
    bias = In("B [dirs, 6H]: W's then R's (zeros when absent)")
    lengths = In("sequence_lens [batch] (the sequence length when absent)")
    initial_h = In("[dirs, batch, H] (zeros when absent)")
    direction = Attr(str, "forward", _DIRECTION_DOC)
    layout = Attr(int, 0, _LAYOUT_DOC)
    activations = Attr(tuple, (), _ACTIVATIONS_DOC)
    activation_alpha = Attr(tuple, (), _ALPHA_DOC)
    activation_beta = Attr(tuple, (), _ALPHA_DOC)
    clip = Attr(float, math.inf, _CLIP_DOC)
    linear_before_reset = Attr(int, 0, "1: r * (h R_h + Rb_h); 0: (r * h) R_h + Rb_h")
    examples = (
        ex("f32[4,2,3]", "f32[1,15,3]", "f32[1,15,5]", "f32[1,30]", "i32[2]", "f32[1,2,5]"),
        ex(
            "f32[3,2,4]", "f32[2,9,4]", "f32[2,9,3]", "f32[2,18]", "i32[3]", "f32[3,2,3]",
            direction="bidirectional", layout=1, linear_before_reset=1,
            activations=("HardSigmoid", "Softsign", "Sigmoid", "Tanh"), activation_alpha=(0.3,),
        ),
    )  # fmt: skip

    def sample(rng, input, weights, recurrence, bias, lengths, initial_h, **attrs):
        return _sample(rng, [input, weights, recurrence, bias, lengths, initial_h], attrs.get("layout", 0))

    def type(
        input, weights, recurrence, bias, lengths, initial_h,
        direction, layout, activations, activation_alpha, activation_beta, clip, linear_before_reset,
    ):  # fmt: skip
        operands = dict(locals())
        expect(
            linear_before_reset in (0, 1), f"linear_before_reset {linear_before_reset} is not 0 or 1", input
        )
        return _recurrent_type("GRU", _only(operands, GRU), operands)

    def lower(
        b, input, weights, recurrence, bias, lengths, initial_h,
        direction, layout, activations, activation_alpha, activation_beta, clip, linear_before_reset,
    ):  # fmt: skip
        attrs = dict(locals())
        return _lower_recurrent(b, "GRU", _only(attrs, GRU), attrs)


@node
class RNN:
    """ONNX RNN: h' = f(x W^T + h R^T + Wb + Rb); result Y then the final hidden state along
    the sequence axis."""

    input = In()
    weights = In("W [dirs, H, I]")
    recurrence = In("R [dirs, H, H]")
    bias = In("B [dirs, 2H]: W's then R's (zeros when absent)")
    lengths = In("sequence_lens [batch] (the sequence length when absent)")
    initial_h = In("[dirs, batch, H] (zeros when absent)")
    direction = Attr(str, "forward", _DIRECTION_DOC)
    layout = Attr(int, 0, _LAYOUT_DOC)
    activations = Attr(tuple, (), _ACTIVATIONS_DOC)
    activation_alpha = Attr(tuple, (), _ALPHA_DOC)
    activation_beta = Attr(tuple, (), _ALPHA_DOC)
    clip = Attr(float, math.inf, _CLIP_DOC)
    examples = (
        ex("f32[5,2,3]", "f32[1,4,3]", "f32[1,4,4]", "f32[1,8]", "i32[2]", "f32[1,2,4]"),
        ex(
            "f32[3,4,2]", "f32[1,3,2]", "f32[1,3,3]", "f32[1,6]", "i64[4]", "f32[1,4,3]",
            direction="reverse", layout=0, activations=("ScaledTanh",), activation_alpha=(1.5,),
            activation_beta=(0.5,), clip=1.0,
        ),
    )  # fmt: skip

    def sample(rng, input, weights, recurrence, bias, lengths, initial_h, **attrs):
        return _sample(rng, [input, weights, recurrence, bias, lengths, initial_h], attrs.get("layout", 0))

    def type(
        input, weights, recurrence, bias, lengths, initial_h,
        direction, layout, activations, activation_alpha, activation_beta, clip,
    ):  # fmt: skip
        operands = dict(locals())
        return _recurrent_type("RNN", _only(operands, RNN), operands)

    def lower(
        b, input, weights, recurrence, bias, lengths, initial_h,
        direction, layout, activations, activation_alpha, activation_beta, clip,
    ):  # fmt: skip
        attrs = dict(locals())
        return _lower_recurrent(b, "RNN", _only(attrs, RNN), attrs)


def _only(values: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The operands among a declared function's arguments (the rest are attributes)."""
    return {name: values[name] for name in spec.operands}
