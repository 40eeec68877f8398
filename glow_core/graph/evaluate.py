"""Evaluate a graph directly with the primitives' reference semantics.

This is the graph-level oracle used by pass and loader tests: it lowers a copy of the
module and runs every primitive's ``reference`` in topological order. It has no memory
plan and no IR, so it checks the graph stages independently of the backends.
"""

from __future__ import annotations

import numpy as np

from glow_core.errors import InputError
from glow_core.graph.function import Module
from glow_core.graph.node import Constant, Node, Placeholder
from glow_core.lowering import lower_function


def evaluate(
    module: Module, inputs: dict[str, np.ndarray], function: str | None = None
) -> dict[str, np.ndarray]:
    """Outputs (name -> array, in the output types) of one function for ``inputs``."""
    module = module.clone()
    fn = module.functions[function] if function else module.function
    lower_function(fn)
    values: dict[Node, np.ndarray] = {}
    for ph in fn.inputs:
        if ph.name not in inputs:
            raise InputError(f"missing input {ph.name!r}")
        values[ph] = np.asarray(inputs[ph.name])
    outputs: dict[str, np.ndarray] = {}
    for n in fn.topological_order():
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
