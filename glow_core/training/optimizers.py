"""Optimizers as graph builders: each turns (weight, gradient, state) into the next weight
and state, built into the training function so a backend runs the update with the rest."""

from __future__ import annotations

from dataclasses import dataclass

from glow_core.errors import DifferentiationError
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node


@dataclass(frozen=True)
class SGD:
    """Stochastic gradient descent with heavy-ball momentum and L2 weight decay, as PyTorch's
    ``torch.optim.SGD`` defines them (so a run can be compared step for step)::

        g' = g + weight_decay * w
        v' = momentum * v + g'        (v starts at zero; skipped when momentum is 0)
        w' = w - lr * v'
    """

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise DifferentiationError(f"SGD: the learning rate must be positive, got lr={self.lr}")
        if not 0 <= self.momentum < 1:
            raise DifferentiationError(f"SGD: momentum must lie in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise DifferentiationError(f"SGD: weight_decay must be >= 0, got {self.weight_decay}")

    @property
    def state_names(self) -> tuple[str, ...]:
        """The per-weight state tensors (each shaped like its weight, starting at zero)."""
        return ("velocity",) if self.momentum else ()

    def update(
        self, b: Builder, weight: Node, grad: Node, state: dict[str, Node]
    ) -> tuple[Node, dict[str, Node]]:
        """The next weight and the next value of each state tensor."""
        if self.weight_decay:
            grad = b.Add(grad, b.Mul(weight, b.splat(self.weight_decay, weight)))
        step, next_state = grad, {}
        if self.momentum:
            step = b.Add(b.Mul(state["velocity"], b.splat(self.momentum, weight)), grad)
            next_state["velocity"] = step
        return b.Sub(weight, b.Mul(step, b.splat(self.lr, weight))), next_state
