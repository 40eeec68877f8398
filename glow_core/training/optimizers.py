"""Optimizers as graph builders: each turns (weight, gradient, state) into the next weight
and state, built into the training function so a backend runs the update with the rest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from glow_core.errors import DifferentiationError
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node
from glow_core.types import Type


class Optimizer(Protocol):
    """What ``differentiate`` asks of an optimizer: its learning rate (the first value of
    the training function's ``learning_rate`` input), the state each weight carries
    between steps (by name, with its initial value) and the graph of one update."""

    @property
    def lr(self) -> float: ...

    def initial_state(self, weight: Type) -> dict[str, np.ndarray]: ...

    def update(
        self, b: Builder, weight: Node, grad: Node, state: dict[str, Node], lr: Node
    ) -> tuple[Node, dict[str, Node]]: ...


def _times_lr(b: Builder, x: Node, lr: Node) -> Node:
    """``x`` scaled by the one-element learning rate ``lr`` (an input of the training
    function, so a schedule changes it between steps without recompiling)."""
    return b.Mul(x, b.broadcast_to(b.Reshape(lr, shape=(1,) * x.type.rank), x.type.shape))


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

    def initial_state(self, weight: Type) -> dict[str, np.ndarray]:
        """The velocity, starting at zero (none without momentum)."""
        return {"velocity": np.zeros(weight.shape, weight.dtype)} if self.momentum else {}

    def update(
        self, b: Builder, weight: Node, grad: Node, state: dict[str, Node], lr: Node
    ) -> tuple[Node, dict[str, Node]]:
        """The next weight and the next value of each state tensor."""
        if self.weight_decay:
            grad = b.Add(grad, b.Mul(weight, b.splat(self.weight_decay, weight)))
        step, next_state = grad, {}
        if self.momentum:
            step = b.Add(b.Mul(state["velocity"], b.splat(self.momentum, weight)), grad)
            next_state["velocity"] = step
        return b.Sub(weight, _times_lr(b, step, lr)), next_state


@dataclass(frozen=True)
class Adam:
    """Adam (Kingma & Ba) with L2 weight decay added to the gradient, as PyTorch's
    ``torch.optim.Adam`` defines it::

        g' = g + weight_decay * w
        m' = beta1 * m + (1 - beta1) * g'          v' = beta2 * v + (1 - beta2) * g'^2
        w' = w - lr * (m' / (1 - beta1^t)) / (sqrt(v' / (1 - beta2^t)) + eps)

    The step count t enters only as beta^t, so each weight carries the two powers as
    scalar state (starting at 1, multiplied by beta every step) instead of a counter.
    """

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise DifferentiationError(f"Adam: the learning rate must be positive, got lr={self.lr}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise DifferentiationError(f"Adam: {name} must lie in [0, 1), got {getattr(self, name)}")
        if not self.eps > 0 or self.weight_decay < 0:
            raise DifferentiationError(
                f"Adam: eps must be positive and weight_decay >= 0, got eps={self.eps}, "
                f"weight_decay={self.weight_decay}"
            )

    def initial_state(self, weight: Type) -> dict[str, np.ndarray]:
        """First and second moments at zero; the powers beta1^t, beta2^t at t = 0."""
        zeros = np.zeros(weight.shape, weight.dtype)
        one = np.ones((), weight.dtype)
        return {"m": zeros, "v": zeros.copy(), "beta1_power": one, "beta2_power": one.copy()}

    def update(
        self, b: Builder, weight: Node, grad: Node, state: dict[str, Node], lr: Node
    ) -> tuple[Node, dict[str, Node]]:
        """The next weight, moments and powers."""

        def scaled(x: Node, factor: float) -> Node:
            return b.Mul(x, b.splat(factor, x))

        if self.weight_decay:
            grad = b.Add(grad, scaled(weight, self.weight_decay))
        m = b.Add(scaled(state["m"], self.beta1), scaled(grad, 1 - self.beta1))
        v = b.Add(scaled(state["v"], self.beta2), scaled(b.Mul(grad, grad), 1 - self.beta2))
        p1, p2 = scaled(state["beta1_power"], self.beta1), scaled(state["beta2_power"], self.beta2)
        shape = weight.type.shape
        m_hat = b.Div(m, b.broadcast_to(b.Sub(b.splat(1.0, p1), p1), shape))
        v_hat = b.Div(v, b.broadcast_to(b.Sub(b.splat(1.0, p2), p2), shape))
        step = b.Div(m_hat, b.Add(b.Sqrt(v_hat), b.splat(self.eps, v_hat)))
        new_state = {"m": m, "v": v, "beta1_power": p1, "beta2_power": p2}
        return b.Sub(weight, _times_lr(b, step, lr)), new_state
