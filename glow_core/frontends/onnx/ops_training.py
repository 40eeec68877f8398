"""Importers for the optimizer steps of ``ai.onnx.preview.training``: Adagrad, Adam, Momentum.

Each op updates n tensors at once: its inputs are the learning rate R and the step count T
(scalars), then n tensors per role (X..., G..., then the optimizer's state: H... or V...),
and its outputs are the updated tensors grouped by role the same way. Every update is
element-wise math on one tensor, so each tensor's step is a small chain of primitives; the
step-dependent factors (R / (1 + T * decay), Adam's bias correction, Momentum's first-step
coefficient) are computed from the run-time scalars R and T, never at load time.
"""

from __future__ import annotations

from glow_core.errors import ShapeError
from glow_core.frontends.onnx import build
from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.builder import Builder
from glow_core.graph.node import Node

TRAINING_DOMAIN = "ai.onnx.preview.training"


def _groups(ctx: NodeContext, roles: int) -> list[list[Node]]:
    """The tensor inputs after R and T split into ``roles`` equal groups (X, G, state...)."""
    count = len(ctx.proto.input) - 2
    if count < roles or count % roles:
        raise ShapeError(f"takes R, T and {roles} groups of equally many tensors, got {count} tensor inputs")
    n = count // roles
    nodes = [ctx.node(2 + i) for i in range(count)]
    groups = [nodes[r * n : (r + 1) * n] for r in range(roles)]
    for parts in zip(*groups, strict=True):
        if len({p.type for p in parts}) != 1:
            types = ", ".join(str(p.type) for p in parts)
            raise ShapeError(f"the tensors of one update differ in type: {types}")
    return groups


def _scalars(ctx: NodeContext, like: Node) -> tuple[Node, Node]:
    """R and T as one-element tensors of ``like``'s float kind."""
    r, t = ctx.node(0), ctx.node(1)
    for index, value in ((0, r), (1, t)):
        if value.type.size != 1:
            raise ShapeError(f"input {index} must be a scalar, got {value.type}")
    one = (1,) * like.type.rank
    r = build.convert(ctx.b, ctx.b.Reshape(r, shape=one), like.type.elem)
    t = build.convert(ctx.b, ctx.b.Reshape(t, shape=one), like.type.elem)
    return r, t


def _regularized(b: Builder, x: Node, g: Node, norm: float) -> Node:
    """The gradient of the loss plus that of the L2 term: norm * x + g."""
    return b.add(b.mul(x, norm), g) if norm else g


def _positive(b: Builder, t: Node) -> Node:
    """T > 0, as bool."""
    return build.compare(b, t, build.scalar(b, 0, t), "gt")


@importer("Adagrad", domain=TRAINING_DOMAIN)
def _adagrad(ctx: NodeContext) -> list[Node]:
    """x -= R / (1 + T * decay) * g' / (sqrt(h + g'^2) + eps), with g' = norm * x + g."""
    xs, gs, hs = _groups(ctx, 3)
    decay = float(ctx.attr("decay_factor", 0.0))
    eps, norm = float(ctx.attr("epsilon", 0.0)), float(ctx.attr("norm_coefficient", 0.0))
    b = ctx.b
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        r, t = _scalars(ctx, x)
        rate = b.div(r, b.add(b.mul(t, decay), 1.0))
        grad = _regularized(b, x, g, norm)
        h_new = b.add(h, b.Mul(grad, grad))
        step = b.div(b.mul(grad, rate), b.add(b.Sqrt(h_new), eps))
        new_x.append(b.Sub(x, step))
        new_h.append(h_new)
    return [*new_x, *new_h]


@importer("Adam", domain=TRAINING_DOMAIN)
def _adam(ctx: NodeContext) -> list[Node]:
    """Adam with bias correction from step 1 on; ``norm_coefficient_post`` shrinks the result."""
    xs, gs, vs, hs = _groups(ctx, 4)
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    eps, norm = float(ctx.attr("epsilon", 0.0)), float(ctx.attr("norm_coefficient", 0.0))
    post = float(ctx.attr("norm_coefficient_post", 0.0))
    b = ctx.b
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        r, t = _scalars(ctx, x)
        grad = _regularized(b, x, g, norm)
        v_new = b.add(b.mul(v, alpha), b.mul(grad, 1.0 - alpha))
        h_new = b.add(b.mul(h, beta), b.mul(b.Mul(grad, grad), 1.0 - beta))
        # R * sqrt(1 - beta^T) / (1 - alpha^T) once T > 0; plain R at step 0 (where the
        # unused branch is computed at T = 1, so it never divides 0 by 0).
        later = b.max(t, 1.0)
        power = [b.pow(b.splat(base, t), later) for base in (beta, alpha)]
        corrected = b.div(b.mul(r, b.Sqrt(b.sub(1.0, power[0]))), b.sub(1.0, power[1]))
        rate = b.Select(_positive(b, t), corrected, r)
        x_new = b.Sub(x, b.mul(b.Div(v_new, b.add(b.Sqrt(h_new), eps)), rate))
        new_x.append(b.mul(x_new, 1.0 - post) if post else x_new)
        new_v.append(v_new)
        new_h.append(h_new)
    return [*new_x, *new_v, *new_h]


@importer("Momentum", domain=TRAINING_DOMAIN)
def _momentum(ctx: NodeContext) -> list[Node]:
    """v = alpha * v + beta' * g' (beta' = 1 at step 0); x -= R * v, or R * (g' + alpha * v)
    for ``mode="nesterov"``."""
    xs, gs, vs = _groups(ctx, 3)
    alpha, beta = float(ctx.required_attr("alpha")), float(ctx.required_attr("beta"))
    norm = float(ctx.required_attr("norm_coefficient"))
    mode = ctx.required_attr("mode")
    if mode not in ("standard", "nesterov"):
        raise ctx.refuse(f"mode {mode!r} is not one of standard, nesterov")
    b = ctx.b
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        r, t = _scalars(ctx, x)
        grad = _regularized(b, x, g, norm)
        coefficient = b.Select(_positive(b, t), b.splat(beta, t), b.splat(1.0, t))
        v_new = b.add(b.mul(v, alpha), b.mul(grad, coefficient))
        direction = v_new if mode == "standard" else b.add(grad, b.mul(v_new, alpha))
        new_x.append(b.sub(x, b.mul(direction, r)))
        new_v.append(v_new)
    return [*new_x, *new_v]
