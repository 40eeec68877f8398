"""Mutations of nodes: their inputs, outputs, op types and order."""

from __future__ import annotations

import random

import onnx

from fuzz.mutate.hostile import tensor_names
from fuzz.mutate.registry import mutation


@mutation("node-input")
def node_input(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node input renamed to an unknown tensor, emptied, duplicated, dropped, or two swapped."""
    nodes = [n for n in model.graph.node if n.input]
    if not nodes:
        return None
    node = rng.choice(nodes)
    index = rng.randrange(len(node.input))
    label = f"node {node.name or node.op_type!r}"
    choice = rng.randrange(5)
    if choice == 0:
        node.input[index] = "no_such_tensor"
        return f"{label}: input {index} names a tensor that does not exist"
    if choice == 1:
        node.input[index] = ""
        return f"{label}: input {index} left out"
    if choice == 2:
        node.input.append(node.input[index])
        return f"{label}: input {index} repeated as an extra input"
    if choice == 3:
        del node.input[-1]
        return f"{label}: last input dropped"
    other = rng.randrange(len(node.input))
    node.input[index], node.input[other] = node.input[other], node.input[index]
    return f"{label}: inputs {index} and {other} swapped"


@mutation("node-output")
def node_output(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node output renamed to an existing tensor (two producers), dropped, or one added."""
    nodes = [n for n in model.graph.node if n.output]
    if not nodes:
        return None
    node = rng.choice(nodes)
    label = f"node {node.name or node.op_type!r}"
    choice = rng.randrange(3)
    if choice == 0:
        index = rng.randrange(len(node.output))
        node.output[index] = rng.choice(tensor_names(model))
        return f"{label}: output {index} renamed {node.output[index]!r}"
    if choice == 1:
        del node.output[-1]
        return f"{label}: last output dropped"
    node.output.append(f"{node.output[0]}_extra")
    return f"{label}: an extra output added"


@mutation("node-op-type")
def node_op_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node's op type replaced by another op glow knows, an unknown op, or a foreign domain."""
    from glow_core.frontends.onnx import SUPPORTED_OPS

    if not model.graph.node:
        return None
    node = rng.choice(model.graph.node)
    old = node.op_type
    choice = rng.randrange(4)
    if choice == 0:
        node.domain = rng.choice(["com.fuzz", "ai.onnx.ml", "com.microsoft"])
        return f"node {node.name or old!r}: domain {node.domain!r}"
    node.op_type = "FuzzNoSuchOp" if choice == 1 else rng.choice(sorted(SUPPORTED_OPS))
    return f"node {node.name or old!r}: op {old} replaced by {node.op_type}"


@mutation("node-order")
def node_order(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """Nodes shuffled out of topological order, or a cycle made (a node reads a later output)."""
    nodes = list(model.graph.node)
    if len(nodes) < 2:
        return None
    if rng.random() < 0.5:
        rng.shuffle(nodes)
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        return "nodes shuffled"
    first = rng.randrange(len(nodes) - 1)
    later = nodes[rng.randrange(first + 1, len(nodes))]
    if not nodes[first].input or not later.output:
        return None
    nodes[first].input[0] = later.output[0]
    return f"cycle: node {first} reads {later.output[0]!r}, computed after it"
