"""Importers for the loss ops exporters emit for inference-time scoring: NLL and softmax cross-entropy.

loss[n, d...] = -weight[t] * input[n, t, d...] with t = target[n, d...], zero where t is
``ignore_index``; "mean" divides by the total weight of the targets not ignored. The pick of
input[n, t, d...] is a GatherElements along the class axis.
"""

from __future__ import annotations

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.ops_index import gather_elements
from glow_core.frontends.onnx.registry import NodeContext, Rank, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import ElemKind


def _negative_log_likelihood(ctx: NodeContext, log_probs: Node, target: Node, weight: Node | None) -> Node:
    b = ctx.b
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.refuse(f"reduction {reduction!r} is not one of none, sum, mean")
    target = build.convert(b, target, ElemKind.int64)
    ignore = ctx.attr("ignore_index")
    kept = None
    if ignore is not None:
        kept = build.logical_not(b, b.Compare(target, b.splat(int(ignore), target), predicate="eq"))
        target = b.Select(kept, target, b.splat(0, target))  # an ignored target may be out of range
    index = b.reshape(target, (target.type.shape[0], 1) + target.type.shape[1:])
    picked = gather_elements(b, log_probs, index, 1, None)
    loss = b.Sub(
        b.splat(0.0, target.type.with_elem(log_probs.type.elem)), b.reshape(picked, target.type.shape)
    )
    scale = b.Gather(weight, target, axis=0) if weight is not None else None
    if kept is not None:
        flag = b.Convert(kept, elem=log_probs.type.elem.name)
        scale = flag if scale is None else b.Mul(scale, flag)
    if scale is not None:
        loss = b.Mul(loss, scale)
    if reduction == "none":
        return loss
    axes = tuple(range(loss.type.rank))
    total = b.Reshape(b.ReduceSum(loss, axes=axes), shape=())
    if reduction == "sum":
        return total
    count = _count(b, loss) if scale is None else b.Reshape(b.ReduceSum(scale, axes=axes), shape=())
    return b.Div(total, count, name=ctx.name)


def _count(b: Builder, loss: Node) -> Node:
    return b.Splat(shape=(), value=float(loss.type.size), elem=loss.type.elem.name)


_LOSS_RANKS = {0: Rank.at_least(2), 2: 1}
"""Scores are [N, C, d1...], the optional class weights [C]; the target is [N, d1...]."""


def _target(ctx: NodeContext, scores: Node) -> Node:
    """The target input, of the scores' shape without the class axis (1)."""
    target = ctx.node(1)
    expected = scores.type.shape[:1] + scores.type.shape[2:]
    if target.type.shape != expected:
        raise ShapeError(f"target {target.type} must have shape {list(expected)} for scores {scores.type}")
    return target


@importer("NegativeLogLikelihoodLoss", ranks=_LOSS_RANKS)
def _nll_loss(ctx: NodeContext) -> Node:
    log_probs = ctx.node(0)
    return _negative_log_likelihood(ctx, log_probs, _target(ctx, log_probs), ctx.optional_node(2))


@importer("SoftmaxCrossEntropyLoss", ranks=_LOSS_RANKS)
def _softmax_cross_entropy(ctx: NodeContext) -> list[Node]:
    """NLL of LogSoftmax over the class axis (1); the log-probabilities are the second output."""
    scores = ctx.node(0)
    target = _target(ctx, scores)
    log_probs = build.log_softmax(ctx.b, scores, 1, name=f"{ctx.name}:log_prob")
    return [_negative_log_likelihood(ctx, log_probs, target, ctx.optional_node(2)), log_probs]
