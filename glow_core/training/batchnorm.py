"""BatchNorm in training mode: normalize with the batch's statistics and update the running
ones, as PyTorch's ``BatchNorm2d.train()`` does.

The BatchNorm node declares inference semantics (it normalizes with the ``mean`` and ``var``
it is given), which is what a trained model exports. Training needs other semantics, so
``differentiate`` rewrites each BatchNorm whose statistics are Constants into this graph
before lowering; the statistics then travel like optimizer state: inputs fed by the
``TrainingFunction``, their next values outputs, never trained by the gradient.
"""

from __future__ import annotations

from glow_core.errors import DifferentiationError
from glow_core.graph.builder import Builder
from glow_core.graph.function import Function
from glow_core.graph.node import Constant, Node


def running_statistics(fn: Function) -> set[str]:
    """Names of the Constants that BatchNorm nodes of ``fn`` read as running mean and var."""
    return {s.name for n in fn.nodes_of("BatchNorm") for s in (n.mean, n.var) if isinstance(s, Constant)}


def _channel_mean(b: Builder, v: Node, axes: tuple[int, ...], count: int) -> Node:
    total = b.ReduceSum(v, axes=axes)
    return b.Mul(total, b.splat(1.0 / count, total))


def to_training_mode(fn: Function, momentum: float) -> list[tuple[Constant, Node]]:
    """Replace every BatchNorm of ``fn`` by its training-mode graph; returns, per running
    statistic, (the Constant, its next value) for the caller to turn into state."""
    if not 0 <= momentum <= 1:
        raise DifferentiationError(f"batchnorm_momentum must lie in [0, 1], got {momentum}")
    updates: list[tuple[Constant, Node]] = []
    for node in list(fn.nodes_of("BatchNorm")):
        running_mean, running_var = node.mean, node.var
        if not (isinstance(running_mean, Constant) and isinstance(running_var, Constant)):
            raise DifferentiationError(
                f"BatchNorm {node.name!r} reads its running statistics from computed values, "
                f"not Constants: training mode has nowhere to keep their updates"
            )
        b = Builder(fn, prefix=f"{node.name}/train/", predicate=node.predicate)
        x, shape = node.input, node.input.type.shape
        axes = tuple(a for a in range(len(shape)) if a != 1)
        count = x.type.size // shape[1]
        per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)

        mean = _channel_mean(b, x, axes, count)
        centered = b.Sub(x, b.Broadcast(mean, shape=shape))
        var = _channel_mean(b, b.Mul(centered, centered), axes, count)  # biased: what normalizes
        denom = b.Sqrt(b.Add(var, b.splat(node.epsilon, var)))
        normalized = b.Div(centered, b.Broadcast(denom, shape=shape))
        scale = b.Broadcast(b.Reshape(node.scale, shape=per_channel), shape=shape)
        bias = b.Broadcast(b.Reshape(node.bias, shape=per_channel), shape=shape)
        fn.replace_all_uses(node, b.Add(b.Mul(normalized, scale), bias))
        fn.erase(node)
        # The running variance is the unbiased one, as PyTorch keeps it.
        unbias = count / max(count - 1, 1)
        for running, batch, factor in ((running_mean, mean, 1.0), (running_var, var, unbias)):
            flat = b.Reshape(batch, shape=running.type.shape)
            kept = b.Mul(running, b.splat(1.0 - momentum, running))
            updates.append((running, b.Add(kept, b.Mul(flat, b.splat(momentum * factor, flat)))))
    return updates
