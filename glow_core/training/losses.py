"""Loss functions built from declared nodes, so they differentiate like any other graph."""

from __future__ import annotations

from glow_core.errors import ShapeError
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node


def softmax_cross_entropy(b: Builder, logits: Node, labels: Node) -> Node:
    """Mean over the batch of ``-sum(labels * log_softmax(logits))``: logits [N, C] and
    one-hot (or soft) labels [N, C] give a [1, 1] loss.

    Built on LogSoftmax, which subtracts the row maximum, so large logits never overflow.
    """
    if logits.type.rank != 2 or labels.type != logits.type:
        raise ShapeError(
            f"softmax_cross_entropy: logits must be [N, C] and labels the same type, "
            f"got {logits.type} and {labels.type}; pass labels one-hot encoded"
        )
    log_probs = b.LogSoftmax(logits, axis=1)
    total = b.ReduceSum(b.Mul(labels, log_probs), axes=(0, 1))
    return b.Mul(total, b.splat(-1.0 / logits.type.shape[0], total))


def mean_squared_error(b: Builder, prediction: Node, target: Node) -> Node:
    """Mean of ``(prediction - target)**2`` over every element, as a one-element tensor."""
    if prediction.type != target.type:
        raise ShapeError(f"mean_squared_error: {prediction.type} vs {target.type}: types must match")
    diff = b.Sub(prediction, target)
    axes = tuple(range(diff.type.rank))
    total = b.ReduceSum(b.Mul(diff, diff), axes=axes)
    return b.Mul(total, b.splat(1.0 / diff.type.size, total))
