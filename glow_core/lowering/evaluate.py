"""Evaluate a graph directly with the primitives' reference semantics.

The graph-level oracle of pass and loader tests: it lowers a copy of the module and runs
every primitive's ``reference`` in topological order. It has no memory plan and no IR, so it
checks the graph stages independently of the backends. It sits beside the lowering driver,
not in graph/, because it runs it: the graph layer imports no stage that runs on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from glow_core.errors import InputError
from glow_core.graph.function import Module
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.lowering import lower_function
from glow_core.spec import OpSpec
from glow_core.types import Type


def evaluate(
    module: Module, inputs: dict[str, np.ndarray], function: str | None = None
) -> dict[str, np.ndarray]:
    """Outputs (name -> array, in the output types) of one function for ``inputs``."""
    module = module.clone()
    fn = module.functions[function] if function else module.function
    lower_function(fn)
    return _run(fn.inputs, fn.topological_order(), inputs)


def node_semantics(
    spec: OpSpec, types: Sequence[Type], attrs: dict[str, Any]
) -> Callable[[Sequence[np.ndarray]], np.ndarray]:
    """A high-level node's semantics as a function of its operand arrays: its lowering, built
    once, run with the primitives' references (how a reference backend runs a node it keeps)."""
    module = Module(spec.name)
    fn = module.create_function()
    b = fn.builder()
    operands = [b.placeholder(f"in{i}", t.shape, t.elem) for i, t in enumerate(types)]
    b.save(b.create(spec.name, *operands, **attrs), "out")
    lower_function(fn)
    order = fn.topological_order()
    inputs = fn.inputs

    def run(arrays: Sequence[np.ndarray]) -> np.ndarray:
        return _run(inputs, order, {f"in{i}": a for i, a in enumerate(arrays)})["out"]

    return run


def _run(inputs: list[Placeholder], order: list[Node], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values: dict[Node, np.ndarray] = {}
    for ph in inputs:
        if ph.name not in feeds:
            raise InputError(f"missing input {ph.name!r}")
        values[ph] = np.asarray(feeds[ph.name])
    outputs: dict[str, np.ndarray] = {}
    for n in order:
        operands = [_value(values, i) for i in n.inputs]
        if n.kind == "Save":
            outputs[n.inputs[1].name] = operands[0]
            continue
        result = n.spec.evaluate(operands, n.attrs)
        values[n] = np.asarray(result).astype(n.type.dtype).reshape(n.type.shape)
    return outputs


def _value(values: dict[Node, np.ndarray], node: Node) -> np.ndarray:
    if isinstance(node, Constant):
        return node.value
    if isinstance(node, Placeholder) and node.is_output:
        return np.zeros(node.type.shape, node.type.dtype)
    return values[node]
