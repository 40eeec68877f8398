"""Transformer models: an encoder stack and a BERT-mini-sized one."""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx

from glow_core.model_zoo.layers import (
    INPUT_NAME,
    GraphBuilder,
    gelu,
    layer_norm,
    linear,
)


def _split_heads(b: GraphBuilder, x: str, name: str, shape: str, perm: Sequence[int]) -> str:
    """Reshape [N, S, H] -> [N, S, heads, d] then Transpose with ``perm``."""
    y = b.node("Reshape", [x, shape], f"{name}/reshape")
    return b.node("Transpose", [y], f"{name}/transpose", perm=list(perm))


def _self_attention(
    b: GraphBuilder, x: str, batch: int, seq: int, hidden: int, heads: int, prefix: str = ""
) -> str:
    """Multi-head self-attention in the primitive form ONNX exporters produce."""
    head_dim = hidden // heads
    split_shape = b.int64s(f"{prefix}attn.split_shape", [batch, seq, heads, head_dim])
    merge_shape = b.int64s(f"{prefix}attn.merge_shape", [batch, seq, hidden])
    q = linear(b, x, f"{prefix}attn/q_proj", hidden, hidden)
    k = linear(b, x, f"{prefix}attn/k_proj", hidden, hidden)
    v = linear(b, x, f"{prefix}attn/v_proj", hidden, hidden)
    q = _split_heads(b, q, f"{prefix}attn/q", split_shape, [0, 2, 1, 3])
    k_t = _split_heads(b, k, f"{prefix}attn/k", split_shape, [0, 2, 3, 1])
    v = _split_heads(b, v, f"{prefix}attn/v", split_shape, [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k_t], f"{prefix}attn/scores")
    scores = b.node("Mul", [scores, b.scalar(1.0 / math.sqrt(head_dim))], f"{prefix}attn/scale")
    probs = b.node("Softmax", [scores], f"{prefix}attn/softmax", axis=-1)
    context = b.node("MatMul", [probs, v], f"{prefix}attn/context")
    context = b.node("Transpose", [context], f"{prefix}attn/merge/transpose", perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, merge_shape], f"{prefix}attn/merge/reshape")
    return linear(b, context, f"{prefix}attn/out_proj", hidden, hidden)


def _encoder_layer(
    b: GraphBuilder, x: str, batch: int, seq: int, hidden: int, heads: int, ffn: int, prefix: str = ""
) -> str:
    """Post-LN BERT layer: MHSA + residual + LN, GELU FFN + residual + LN."""
    attn = _self_attention(b, x, batch, seq, hidden, heads, prefix)
    y = b.node("Add", [x, attn], f"{prefix}attn/residual")
    y = layer_norm(b, y, f"{prefix}attn/layernorm", hidden)
    h = linear(b, y, f"{prefix}ffn/fc1", hidden, ffn)
    h = gelu(b, h, f"{prefix}ffn/gelu")
    h = linear(b, h, f"{prefix}ffn/fc2", ffn, hidden)
    y = b.node("Add", [y, h], f"{prefix}ffn/residual")
    return layer_norm(b, y, f"{prefix}ffn/layernorm", hidden)


def transformer_encoder(
    batch: int = 1,
    seed: int = 0,
    seq: int = 16,
    hidden: int = 64,
    heads: int = 4,
    ffn: int = 256,
    layers: int = 1,
) -> onnx.ModelProto:
    """Post-LN BERT-style encoder: ``layers`` x (MHSA + residual + LN, GELU FFN + residual + LN).

    The input is the embedded sequence ``[batch, seq, hidden]`` (the token embedding is a
    Gather, not what this model is here to measure). The defaults are one small layer, an
    overhead-bound graph; :func:`bert_mini` is the compute-bound size.
    """
    if hidden % heads:
        raise ValueError(f"hidden={hidden} is not divisible by heads={heads}")
    if layers < 1:
        raise ValueError(f"layers={layers} must be at least 1")
    b = GraphBuilder(seed)
    y = INPUT_NAME
    for layer in range(layers):
        prefix = f"layer{layer}/" if layers > 1 else ""
        y = _encoder_layer(b, y, batch, seq, hidden, heads, ffn, prefix)
    shape = [batch, seq, hidden]
    name = "transformer_encoder" if layers == 1 else f"transformer_encoder_{layers}l"
    return b.build(name, shape, y, shape)


def bert_mini(batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """BERT-mini's encoder (Turc et al. 2019): 4 layers, hidden 256, 4 heads, FFN 1024, seq 128.

    0.87 GFLOP per sequence, 3.2M weights: the size at which the dense layers, not the
    per-op overhead, set the latency (the peers' BERT-mini figures are for this shape).
    """
    return transformer_encoder(batch, seed, seq=128, hidden=256, heads=4, ffn=1024, layers=4)
