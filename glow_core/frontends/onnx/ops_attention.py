"""Importer for ONNX Attention (opsets 23-25): scaled dot-product attention, lowered in place.

Scores are (Q sqrt(s)) (K sqrt(s))^T with an additive bias made of the float mask and a
boolean "allowed" mask (the boolean attn_mask, causal frontier, sliding window and
non-padding lengths) turned into 0/-inf by one Select. The softmax is the guarded form
ONNX specifies: a fully masked row gives zeros, not NaN.
"""

from __future__ import annotations

import math

import numpy as np

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.graph.nodes.attention import (
    QUERY_KIND,
    attention_scores,
    guarded_softmax,
    head_groups,
    repeat_heads,
)
from glow_core.types import ElemKind


def _heads_first(b: Builder, x: Node, heads: int) -> Node:
    """[B, S, H*D] -> [B, H, S, D]."""
    batch, seq, hidden = x.type.shape
    return b.Transpose(b.Reshape(x, shape=(batch, seq, heads, hidden // heads)), shuffle=(0, 2, 1, 3))


def _softmax_kind(ctx: NodeContext, default: ElemKind) -> ElemKind:
    """The softmax precision (``softmax_precision``), ``default`` when absent or float64."""
    if "softmax_precision" not in ctx.attrs:
        return default
    kind = ctx.elem_attr("softmax_precision")
    return default if kind is ElemKind.float64 else kind


def _softmax_name(ctx: NodeContext) -> str:
    """The Attention node's ``softmax_kind``: the precision's kind name, or the query's own
    (``softmax_precision`` absent or float64)."""
    if "softmax_precision" not in ctx.attrs:
        return QUERY_KIND
    kind = ctx.elem_attr("softmax_precision")
    return QUERY_KIND if kind is ElemKind.float64 else kind.name


def _and(b: Builder, lhs: Node | None, rhs: Node) -> Node:
    if lhs is None:
        return rhs
    lhs, rhs = build.broadcast(b, lhs, rhs)
    return b.Select(lhs, rhs, b.splat(False, rhs))


def _frontiers(ctx: NodeContext, q_len: int, kv_len: int, offset: Node | int) -> Node | None:
    """The causal and sliding-window "allowed" mask, [q, kv] or [B, 1, q, kv] (per-batch offset)."""
    b = ctx.b
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    causal = bool(ctx.attr("is_causal", 0))
    if not causal and left < 0 and right < 0:
        return None
    i = np.arange(q_len, dtype=np.int64).reshape(-1, 1)
    j = np.arange(kv_len, dtype=np.int64).reshape(1, -1)
    if isinstance(offset, int):  # diff = i + offset - j, all known now
        diff = i + offset - j
        allowed = np.ones((q_len, kv_len), bool)
        if causal:
            allowed &= diff >= 0
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        return build.constant(b, allowed, "frontier")
    # Per-batch offset (external cache): with rel = j - i, diff = offset - rel.
    per_batch = b.Reshape(offset, shape=(offset.type.shape[0], 1, 1, 1))
    rel = (j - i).reshape(1, 1, q_len, kv_len)
    tests = []
    if causal:  # diff >= 0  <=>  rel <= offset
        tests.append((build.constant(b, rel, "rel"), per_batch))
    if left >= 0:  # diff <= left  <=>  offset <= rel + left
        tests.append((per_batch, build.constant(b, rel + left, "rel")))
    if right >= 0:  # -diff <= right  <=>  rel - right <= offset
        tests.append((build.constant(b, rel - right, "rel"), per_batch))
    mask: Node | None = None
    for lhs, rhs in tests:
        mask = _and(b, mask, build.compare(b, lhs, rhs, "le"))
    return mask


def _attention_bias(ctx: NodeContext, q: Node, kv_len: int, past: int) -> tuple[Node | None, Node | None]:
    """The float bias and the boolean allowed mask (either may be None), before broadcasting."""
    b, q_len = ctx.b, q.type.shape[2]
    float_bias, allowed = None, None
    mask = ctx.optional_node(3)
    if mask is not None:
        short = kv_len - mask.type.shape[-1]
        pads = (0,) * (2 * mask.type.rank - 1) + (short,)  # a short mask is padded at the end
        if mask.type.elem is ElemKind.bool:
            if short > 0:  # with False: as int8 zeros, then back
                wide = b.Pad(build.convert(b, mask, ElemKind.int8), pads=pads, value=0)
                mask = build.logical_not(b, b.Compare(wide, b.splat(0, wide), predicate="eq"))
            allowed = mask
        else:
            if short > 0:
                mask = b.Pad(mask, pads=pads, value=-math.inf)
            float_bias = build.convert(b, mask, q.type.elem)
    lengths = ctx.optional_node(6)
    if lengths is not None:
        lengths = build.convert(b, lengths, ElemKind.int64)
        offset: Node | int = b.sub(lengths, build.scalar(b, q_len, lengths))
        padding = build.compare(
            b,
            build.constant(b, np.arange(kv_len, dtype=np.int64).reshape(1, 1, 1, -1), "key"),
            b.Reshape(lengths, shape=(lengths.type.shape[0], 1, 1, 1)),
            "lt",
        )
        allowed = _and(b, allowed, padding)
    else:
        offset = past
    frontier = _frontiers(ctx, q_len, kv_len, offset)
    if frontier is not None:
        allowed = _and(b, allowed, frontier)
    return float_bias, allowed


def _scale(ctx: NodeContext, q: Node) -> float:
    """The ``scale`` attribute, 1 / sqrt(head size) when absent."""
    scale = ctx.attr("scale")
    return 1.0 / math.sqrt(q.type.shape[3]) if scale is None else float(scale)


def _scores(ctx: NodeContext, q: Node, k: Node) -> Node:
    """(Q sqrt(scale)) (K sqrt(scale))^T, soft-capped when asked."""
    return attention_scores(ctx.b, q, k, _scale(ctx, q), float(ctx.attr("softcap", 0.0)))


_QKV = Rank.between(3, 4)
"""Q, K and V: [B, S, H*D] (3-D, heads given as attributes) or [B, H, S, D]."""


@importer("Attention", ranks={0: _QKV, 1: _QKV, 2: _QKV, 3: Rank.between(2, 4), 4: 4, 5: 4, 6: 1})
def _attention(ctx: NodeContext) -> list[Node | None]:
    """One Attention node (MaskedAttention with a mask, causal or window frontier, or key
    lengths), after the heads are split and the key/value cache concatenated."""
    b = ctx.b
    q, k, v = ctx.node(0), ctx.node(1), ctx.node(2)
    three_d = q.type.rank == 3
    if three_d:
        q_heads, kv_heads = ctx.int_attr("q_num_heads", 0, low=1), ctx.int_attr("kv_num_heads", 0, low=1)
        q, k, v = _heads_first(b, q, q_heads), _heads_first(b, k, kv_heads), _heads_first(b, v, kv_heads)
    if q.type.rank != 4 or k.type.rank != 4 or v.type.rank != 4:
        raise ShapeError(f"Q, K, V must all be 3-D or all 4-D: {q.type}, {k.type}, {v.type}")
    past = 0
    if ctx.has(4) and ctx.has(5):
        past = ctx.node(4).type.shape[2]
        k = b.Concat(ctx.node(4), k, axis=2, name=f"{ctx.name}:present_key")
        v = b.Concat(ctx.node(5), v, axis=2, name=f"{ctx.name}:present_value")
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ctx.refuse(f"qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")
    reps = head_groups(q.type, k.type)
    float_bias, allowed = _attention_bias(ctx, q, k.type.shape[2], past)
    bias = float_bias
    if allowed is not None:
        gate = b.Select(
            allowed,
            b.splat(0.0, allowed.type.with_elem(q.type.elem)),
            b.splat(-math.inf, allowed.type.with_elem(q.type.elem)),
        )
        bias = gate if bias is None else b.add(bias, gate)
    attrs = {
        "scale": _scale(ctx, q),
        "softcap": float(ctx.attr("softcap", 0.0)),
        "softmax_kind": _softmax_name(ctx),
    }
    name = None if three_d else ctx.name
    if bias is None:
        y = b.Attention(q, k, v, name=name, **attrs)
    else:
        y = b.MaskedAttention(q, k, v, bias, name=name, **attrs)
    if three_d:
        batch, heads, seq, dim = y.type.shape
        y = b.Reshape(b.Transpose(y, shuffle=(0, 2, 1, 3)), shape=(batch, seq, heads * dim), name=ctx.name)
    qk_output = _qk_output(ctx, q, repeat_heads(b, k, reps), bias, mode) if ctx.output_requested(3) else None
    return [y, k, v, qk_output]


def _qk_output(ctx: NodeContext, q: Node, k: Node, bias: Node | None, mode: int) -> Node:
    """The optional fourth output: the scores (modes 0, 1), the biased logits (2) or the
    probabilities (3), built with the Attention node's own helpers (common subexpressions
    of its lowering, merged again when it is lowered)."""
    b = ctx.b
    scores = _scores(ctx, q, k)
    if mode in (0, 1):
        return scores
    logits = scores if bias is None else b.add(scores, bias)
    if mode == 2:
        return logits
    work = build.convert(b, logits, _softmax_kind(ctx, logits.type.elem))
    probs = b.Softmax(work, axis=-1) if bias is None else guarded_softmax(b, work, bias)
    return build.convert(b, probs, q.type.elem)


def _last_axis_slice(b: Builder, x: Node, start: int, stop: int, step: int = 1) -> Node:
    shape = x.type.shape
    steps = None if step == 1 else (1,) * (len(shape) - 1) + (step,)
    return b.Slice(x, starts=(0,) * (len(shape) - 1) + (start,), ends=(*shape[:-1], stop), steps=steps)


@importer(
    "RotaryEmbedding", ranks={0: _QKV, 1: Rank.between(2, 3), 2: Rank.between(2, 3), 3: Rank.between(1, 2)}
)
def _rotary_embedding(ctx: NodeContext) -> Node:
    """Rotate (x1, x2) pairs by the cached angles: halves, or even/odd lanes when interleaved."""
    b, x = ctx.b, ctx.node(0)
    original = x.type.shape
    if x.type.rank == 4:  # [B, H, S, D] -> [B, S, H, D]
        x = b.Transpose(x, shuffle=(0, 2, 1, 3))
    else:
        heads = ctx.int_attr("num_heads", 0, low=1)
        x = b.Reshape(x, shape=(original[0], original[1], heads, original[2] // heads))
    batch, seq, heads, dim = x.type.shape
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or dim
    if rot % 2 or not 0 < rot <= dim:
        raise ShapeError(f"the rotary dim {rot} must be even and at most the head dim {dim} of {x.type}")
    cos, sin = ctx.node(1), ctx.node(2)
    if ctx.has(3):
        positions = ctx.node(3)
        cos, sin = b.Gather(cos, positions, axis=0), b.Gather(sin, positions, axis=0)
    cos = b.Reshape(cos, shape=(batch, seq, 1, rot // 2))
    sin = b.Reshape(sin, shape=(batch, seq, 1, rot // 2))
    rotated = _last_axis_slice(b, x, 0, rot)
    interleaved = bool(ctx.attr("interleaved", 0))
    if interleaved:
        x1, x2 = _last_axis_slice(b, rotated, 0, rot, 2), _last_axis_slice(b, rotated, 1, rot, 2)
    else:
        x1, x2 = _last_axis_slice(b, rotated, 0, rot // 2), _last_axis_slice(b, rotated, rot // 2, rot)
    real = b.sub(b.mul(x1, cos), b.mul(x2, sin))
    imag = b.add(b.mul(x1, sin), b.mul(x2, cos))
    if interleaved:
        pairs = (batch, seq, heads, rot // 2, 1)
        joined = b.Concat(b.Reshape(real, shape=pairs), b.Reshape(imag, shape=pairs), axis=4)
        rotated = b.Reshape(joined, shape=(batch, seq, heads, rot))
    else:
        rotated = b.Concat(real, imag, axis=3)
    if rot < dim:
        rotated = b.Concat(rotated, _last_axis_slice(b, x, rot, dim), axis=3)
    if len(original) == 4:
        return b.Transpose(rotated, shuffle=(0, 2, 1, 3), name=ctx.name)
    return b.Reshape(rotated, shape=original, name=ctx.name)


def _time_slice(b: Builder, x: Node, t: int) -> Node:
    """x[:, :, t, :] of a [B, H, T, D] tensor, as [B, H, 1, D]."""
    batch, heads, _, dim = x.type.shape
    return b.Slice(x, starts=(0, 0, t, 0), ends=(batch, heads, t + 1, dim))


def _per_step(b: Builder, x: Node | None, heads: int) -> Node | None:
    """decay or beta [B, T, H*d or H or 1] as [B, H', T, d] float32 (heads first)."""
    if x is None:
        return None
    batch, steps, width = x.type.shape
    groups = heads if width % heads == 0 and width >= heads else width
    x = build.convert(b, x, ElemKind.float32)
    return b.Transpose(b.Reshape(x, shape=(batch, steps, groups, width // groups)), shuffle=(0, 2, 1, 3))


@importer("LinearAttention", ranks={0: 3, 1: 3, 2: 3, 3: 4, 4: 3, 5: 3})
def _linear_attention(ctx: NodeContext) -> list[Node]:
    """The recurrent (linear, gated, delta, gated-delta) state update, unrolled over time in float32."""
    b = ctx.b
    q_heads, kv_heads = ctx.int_attr("q_num_heads", 0, low=1), ctx.int_attr("kv_num_heads", 0, low=1)
    rule = ctx.attr("update_rule", "gated_delta")
    f32 = ElemKind.float32
    q = _heads_first(b, build.convert(b, ctx.node(0), f32), q_heads)
    k = _heads_first(b, build.convert(b, ctx.node(1), f32), kv_heads)
    v = _heads_first(b, build.convert(b, ctx.node(2), f32), kv_heads)
    batch, _, steps, dk = k.type.shape
    dv = v.type.shape[3]
    groups = head_groups(q.type, k.type)
    decay = _per_step(b, ctx.optional_node(4), kv_heads) if rule in ("gated", "gated_delta") else None
    beta = _per_step(b, ctx.optional_node(5), kv_heads) if rule in ("delta", "gated_delta") else None
    past = ctx.optional_node(3)
    state = (
        build.convert(b, past, f32)
        if past is not None
        else b.splat(0.0, k.type.with_shape((batch, kv_heads, dk, dv)))
    )
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(dk)
    outputs = []
    for t in range(steps):
        k_t, v_t = _time_slice(b, k, t), _time_slice(b, v, t)  # [B, H, 1, d]
        if decay is not None:  # state *= exp(g), g per head or per key dim
            gate = b.Exp(_time_slice(b, decay, t))
            state = b.mul(state, b.Transpose(gate, shuffle=(0, 1, 3, 2)))
        if beta is not None:  # delta rule: v = beta * (v - k . state)
            retrieved = b.matmul(k_t, state)
            v_t = b.mul(_time_slice(b, beta, t), b.Sub(v_t, retrieved))
        state = b.Add(state, b.matmul(b.Transpose(k_t, shuffle=(0, 1, 3, 2)), v_t))
        read = repeat_heads(b, state, groups)
        out = b.matmul(_time_slice(b, q, t), read)
        outputs.append(b.Mul(out, b.splat(scale, out)))
    y = b.Concat(*outputs, axis=2)  # [B, Hq, T, dv]
    y = b.Reshape(b.Transpose(y, shuffle=(0, 2, 1, 3)), shape=(batch, steps, q_heads * dv))
    out_kind = ctx.node(0).type.elem
    state_kind = past.type.elem if past is not None else out_kind
    return [build.convert(b, y, out_kind), build.convert(b, state, state_kind)]


def _modified(ctx: NodeContext, key: str, x: Node) -> Node:
    """Apply a FlexAttention modifier subgraph (score_mod, prob_mod) to ``x``, when given."""
    graph = ctx.graphs.get(key)
    if graph is None:
        return x
    (result,) = ctx.scope.import_graph(graph, [x])
    return ctx.to_node(result, key)


@importer("FlexAttention", domain="ai.onnx.preview", ranks={0: 4, 1: 4, 2: 4})
def _flex_attention(ctx: NodeContext) -> Node:
    """Softmax attention with optional score and probability modifier subgraphs (preview domain)."""
    b = ctx.b
    q, k, v = ctx.node(0), ctx.node(1), ctx.node(2)
    reps = head_groups(q.type, k.type)
    work = _softmax_kind(ctx, ElemKind.float32)
    scores = build.convert(b, _scores(ctx, q, repeat_heads(b, k, reps)), work)
    probs = _modified(ctx, "prob_mod", b.Softmax(_modified(ctx, "score_mod", scores), axis=-1))
    y = b.matmul(probs, build.convert(b, repeat_heads(b, v, reps), work))
    return build.convert(b, y, v.type.elem, name=ctx.name)
