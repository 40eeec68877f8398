"""Importer for Einsum: one Einsum node (glow_core.graph.nodes.einsum) over the given operands."""

from __future__ import annotations

from glow_core.frontends.onnx.registry import NodeContext, importer
from glow_core.graph.node import Node


@importer("Einsum")
def _einsum(ctx: NodeContext) -> Node:
    operands = [ctx.node(i) for i in range(len(ctx.proto.input)) if ctx.has(i)]
    return ctx.b.Einsum(*operands, equation=str(ctx.required_attr("equation")), name=ctx.name)
