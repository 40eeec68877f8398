"""Scaled dot-product attention: ``Attention`` and ``MaskedAttention`` (an additive bias).

Both take heads-first operands, query [B, Hq, Sq, D], key [B, Hkv, Skv, D] and value
[B, Hkv, Skv, Dv], with Hq a multiple of Hkv (grouped-query attention: each key/value head
serves Hq / Hkv query heads), and give [B, Hq, Sq, Dv]. The scale is applied as sqrt(scale)
to both Q and K, as ONNX Attention specifies (it keeps the product in range for half
precision). Where the heads come from (a [B, S, H*D] layout, a key/value cache) is the
importer's business; the nodes are the part an accelerator runs as one fused kernel.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from glow_core.errors import ShapeError
from glow_core.graph.nodes.normalization import convert
from glow_core.spec import Attr, In, ex, expect, node
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from glow_core.graph.builder import Builder
    from glow_core.graph.node import Node
    from glow_core.types import Type


QUERY_KIND = "query"
"""The ``softmax_kind`` that means: the softmax runs in the query's element kind."""


def head_groups(query: Type, key: Type) -> int:
    """How many query heads share each key/value head ([B, H, S, D] operands)."""
    q_heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads < 1 or q_heads % kv_heads:
        raise ShapeError(
            f"{q_heads} query heads cannot be shared by {kv_heads} key/value heads ({query}, {key}): "
            "the query heads must be a positive multiple of the key/value heads"
        )
    return q_heads // kv_heads


def repeat_heads(b: Builder, x: Node, reps: int) -> Node:
    """Interleave-repeat each head ``reps`` times: [h0, h0, h1, h1, ...] (grouped-query attention)."""
    if reps == 1:
        return x
    batch, heads, seq, dim = x.type.shape
    spread = b.Broadcast(
        b.Reshape(x, shape=(batch, heads, 1, seq, dim)), shape=(batch, heads, reps, seq, dim)
    )
    return b.Reshape(spread, shape=(batch, heads * reps, seq, dim))


def attention_scores(b: Builder, query: Node, key: Node, scale: float, softcap: float) -> Node:
    """(Q sqrt(scale)) (K sqrt(scale))^T, soft-capped (softcap tanh(s / softcap)) when
    ``softcap`` > 0; ``key`` has as many heads as ``query``."""
    root = float(np.asarray(math.sqrt(scale), dtype=query.type.dtype))
    scores = b.matmul(
        b.Mul(query, b.splat(root, query)),
        b.Transpose(b.Mul(key, b.splat(root, key)), shuffle=(0, 1, 3, 2)),
    )
    if softcap > 0:
        capped = b.Tanh(b.Mul(scores, b.splat(1.0 / softcap, scores)))
        scores = b.Mul(capped, b.splat(softcap, scores))
    return scores


def guarded_softmax(b: Builder, logits: Node, bias: Node) -> Node:
    """Softmax over the last axis; rows whose bias is all -inf become zeros, not NaN (ONNX's
    guard for fully masked rows)."""
    axes, shape = (logits.type.rank - 1,), logits.type.shape
    peak = b.ReduceMax(logits, axes=axes)
    safe = b.Select(b.Compare(peak, b.splat(-math.inf, peak), predicate="eq"), b.splat(0.0, peak), peak)
    exps = b.Exp(b.Sub(logits, b.Broadcast(safe, shape=shape)))
    total = b.ReduceSum(exps, axes=axes)
    total = b.Select(b.Compare(total, b.splat(0.0, total), predicate="eq"), b.splat(1.0, total), total)
    probs = b.Div(exps, b.Broadcast(total, shape=shape))
    bias_peak = b.ReduceMax(bias, axes=(bias.type.rank - 1,))
    masked = b.Compare(bias_peak, b.splat(-math.inf, bias_peak), predicate="eq")
    return b.Select(b.broadcast_to(masked, shape), b.splat(0.0, probs), probs)


def softmax_elem(softmax_kind: str, logits: Type) -> ElemKind:
    """The element kind the softmax runs in: ``softmax_kind``, or the logits' own for ``query``."""
    return logits.elem if softmax_kind == QUERY_KIND else ElemKind.parse(softmax_kind)


def _attention_type(
    query: Type, key: Type, value: Type, scale: float, softcap: float, softmax_kind: str
) -> Type:
    for name, t in (("query", query), ("key", key), ("value", value)):
        expect(t.rank == 4, f"{name} must be 4-D [batch, heads, sequence, head size]", t)
        expect(t.elem == query.elem and t.elem.is_float, "query, key and value must share a float kind", t)
    expect(query.shape[0] == key.shape[0] == value.shape[0], "batch sizes differ", query, key, value)
    expect(query.shape[3] == key.shape[3], "query and key head sizes differ", query, key)
    expect(key.shape[1:3] == value.shape[1:3], "key and value heads or lengths differ", key, value)
    head_groups(query, key)
    expect(scale >= 0 and math.isfinite(scale), f"scale {scale} must be finite and not negative", query)
    if softmax_kind != QUERY_KIND:
        floats = [k.name for k in ElemKind if k.is_float]
        wrong = f"softmax_kind {softmax_kind!r} is not {QUERY_KIND!r} or one of {floats}"
        expect(softmax_kind in floats, wrong, query)
    return query.with_shape(query.shape[:3] + value.shape[3:])


def _attend(b: Builder, query: Node, key: Node, value: Node, bias: Node | None, attrs: tuple) -> Node:
    scale, softcap, softmax_kind = attrs
    reps = head_groups(query.type, key.type)
    scores = attention_scores(b, query, repeat_heads(b, key, reps), scale, softcap)
    logits = scores if bias is None else b.add(scores, bias)
    work = convert(b, logits, softmax_elem(softmax_kind, logits.type))
    probs = b.Softmax(work, axis=-1) if bias is None else guarded_softmax(b, work, bias)
    return b.matmul(convert(b, probs, query.type.elem), repeat_heads(b, value, reps))


class _ScaledDotProduct:
    """What both attention nodes declare: heads-first query, key and value, and how the
    scores are scaled, capped and normalized (``@node`` reads this base first)."""

    query = In()
    key = In()
    value = In()
    scale = Attr(float, doc="the product's factor; 1 / sqrt(head size) is usual")
    softcap = Attr(float, 0.0, "when > 0, scores s become softcap * tanh(s / softcap)")
    softmax_kind = Attr(str, "query", "element kind the softmax runs in; query: the query's own")


@node
class Attention(_ScaledDotProduct):
    """softmax(Q K^T * scale) V per head (optionally soft-capped scores, and a softmax run in
    another float kind); heads-first operands, grouped-query heads allowed."""

    examples = (
        ex("f32[1,2,5,4]", "f32[1,2,6,4]", "f32[1,2,6,3]", scale=0.5),
        ex("f32[2,4,3,8]", "f32[2,2,3,8]", "f32[2,2,3,8]", scale=0.25, softcap=2.0),
    )

    def type(query, key, value, scale, softcap, softmax_kind):
        return _attention_type(query, key, value, scale, softcap, softmax_kind)

    def lower(b, query, key, value, scale, softcap, softmax_kind):
        return _attend(b, query, key, value, None, (scale, softcap, softmax_kind))


@node
class MaskedAttention(_ScaledDotProduct):
    """Attention with an additive ``bias`` on the scores (0 where allowed, -inf where masked,
    or any float mask), broadcast to [B, Hq, Sq, Skv]; a row masked entirely gives zeros."""

    bias = In()
    examples = (ex("f32[1,2,5,4]", "f32[1,2,6,4]", "f32[1,2,6,3]", "f32[5,6]", scale=0.5),)

    def type(query, key, value, bias, scale, softcap, softmax_kind):
        result = _attention_type(query, key, value, scale, softcap, softmax_kind)
        scores = result.shape[:3] + key.shape[2:3]
        expect(bias.elem == query.elem, "the bias must have the query's element kind", bias, query)
        expect(bias.rank <= 4, "the bias must have rank <= 4", bias)
        try:
            fits = np.broadcast_shapes(scores, bias.shape) == scores
        except ValueError:
            fits = False
        expect(fits, f"the bias must broadcast to the scores {scores}", bias, query)
        return result

    def lower(b, query, key, value, bias, scale, softcap, softmax_kind):
        return _attend(b, query, key, value, bias, (scale, softcap, softmax_kind))
