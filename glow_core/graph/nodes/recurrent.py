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

The lowering (``recurrent_lowering.py``) keeps one time step in one function (``_step``): a
backend that runs a kept recurrence as a loop needs exactly what that function reads, which
is all named above. The cells' facts (gates, activations) sit in ``recurrent_cells.py``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from glow_core.graph.nodes.recurrent_cells import (
    ACTIVATION_DEFAULTS,
    DEFAULT_ACTIVATIONS,
    DIRECTIONS,
    GATES,
    canonical_activation,
    check_activations,
)
from glow_core.graph.nodes.recurrent_lowering import lower_recurrent
from glow_core.spec import Attr, In, ex, expect, node, random_tensor
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type

__all__ = [  # the importer reads the cells' facts here, beside the declarations
    "ACTIVATION_DEFAULTS",
    "DEFAULT_ACTIVATIONS",
    "DIRECTIONS",
    "GATES",
    "GRU",
    "LSTM",
    "RNN",
    "canonical_activation",
    "recurrent_outputs",
]


# ---- type rule ---------------------------------------------------------------------------


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
    check_activations(op, dirs, attrs, x)
    clip = attrs["clip"]
    expect(clip > 0, f"clip {clip} must be positive (inf: no clipping)", x)
    steps = seq + (2 if op == "LSTM" else 1)
    shape = (steps, dirs, batch, hidden) if layout == 0 else (batch, steps, dirs, hidden)
    return x.with_shape(shape)


def _sample(rng: np.random.Generator, types: list[Type], layout: int) -> list[np.ndarray]:
    """Standard-normal tensors, and lengths drawn from 1 to the sequence length (lengths
    outside it are undefined in ONNX); the lengths operand is the fifth in every layer."""
    arrays = [random_tensor(rng, t) for t in types]
    x, lengths = types[0], types[4]
    seq = x.shape[0] if layout == 0 else x.shape[1]
    arrays[4] = rng.integers(1, seq + 1, lengths.shape).astype(lengths.dtype)
    return arrays


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


class _RecurrentLayer:
    """What LSTM, GRU and RNN share: ONNX's first six inputs, the attributes every cell
    takes and the sampling of its operands. A plain base class, not an operator: ``@node``
    reads a declaration's bases first, so each layer keeps only what is its own (and says
    how many gates G its weights hold)."""

    input = In()
    weights = In("W [dirs, G*H, I]")
    recurrence = In("R [dirs, G*H, H]")
    bias = In("B [dirs, 2*G*H]: W's then R's (zeros when absent)")
    lengths = In("sequence_lens [batch] (the sequence length when absent)")
    initial_h = In("[dirs, batch, H] (zeros when absent)")
    direction = Attr(str, "forward", _DIRECTION_DOC)
    layout = Attr(int, 0, _LAYOUT_DOC)
    activations = Attr(tuple, (), _ACTIVATIONS_DOC)
    activation_alpha = Attr(tuple, (), _ALPHA_DOC)
    activation_beta = Attr(tuple, (), _ALPHA_DOC)
    clip = Attr(float, math.inf, _CLIP_DOC)

    def sample(rng, *operands, **attrs):
        return _sample(rng, list(operands), attrs.get("layout", 0))


@node
class LSTM(_RecurrentLayer):
    """ONNX LSTM: gates i, o, f, c with optional peepholes, clip, coupled input and forget
    gate; result Y then the final hidden and cell states along the sequence axis."""

    weights = In("W [dirs, 4H, I]")
    recurrence = In("R [dirs, 4H, H]")
    bias = In("B [dirs, 8H]: W's then R's (zeros when absent)")
    initial_c = In("[dirs, batch, H] (zeros when absent)")
    peephole = In("P [dirs, 3H]: i, o, f (zeros when absent)")
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
        return lower_recurrent(b, "LSTM", _only(attrs, LSTM), attrs)


@node
class GRU(_RecurrentLayer):
    """ONNX GRU: gates z, r, h, with the reset applied before or after the recurrent product
    (``linear_before_reset``); result Y then the final hidden state along the sequence axis."""

    weights = In("W [dirs, 3H, I]")
    recurrence = In("R [dirs, 3H, H]")
    bias = In("B [dirs, 6H]: W's then R's (zeros when absent)")
    linear_before_reset = Attr(int, 0, "1: r * (h R_h + Rb_h); 0: (r * h) R_h + Rb_h")
    examples = (
        ex("f32[4,2,3]", "f32[1,15,3]", "f32[1,15,5]", "f32[1,30]", "i32[2]", "f32[1,2,5]"),
        ex(
            "f32[3,2,4]", "f32[2,9,4]", "f32[2,9,3]", "f32[2,18]", "i32[3]", "f32[3,2,3]",
            direction="bidirectional", layout=1, linear_before_reset=1,
            activations=("HardSigmoid", "Softsign", "Sigmoid", "Tanh"), activation_alpha=(0.3,),
        ),
    )  # fmt: skip

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
        return lower_recurrent(b, "GRU", _only(attrs, GRU), attrs)


@node
class RNN(_RecurrentLayer):
    """ONNX RNN: h' = f(x W^T + h R^T + Wb + Rb); result Y then the final hidden state along
    the sequence axis."""

    weights = In("W [dirs, H, I]")
    recurrence = In("R [dirs, H, H]")
    bias = In("B [dirs, 2H]: W's then R's (zeros when absent)")
    examples = (
        ex("f32[5,2,3]", "f32[1,4,3]", "f32[1,4,4]", "f32[1,8]", "i32[2]", "f32[1,2,4]"),
        ex(
            "f32[3,4,2]", "f32[1,3,2]", "f32[1,3,3]", "f32[1,6]", "i64[4]", "f32[1,4,3]",
            direction="reverse", layout=0, activations=("ScaledTanh",), activation_alpha=(1.5,),
            activation_beta=(0.5,), clip=1.0,
        ),
    )  # fmt: skip

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
        return lower_recurrent(b, "RNN", _only(attrs, RNN), attrs)


def _only(values: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The operands among a declared function's arguments (the rest are attributes)."""
    return {name: values[name] for name in spec.operands}
