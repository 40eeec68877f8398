"""What a lowering may know about an operand at compile time.

Importers pass what ONNX means by an absent optional input (a zero bias, zero initial
states, full sequence lengths) as a constant operand, so a kept node always has its
operands; the lowering asks ``filled_with`` and builds nothing for such a constant, so the
lowered graph is what the importer emitted when it skipped the input.
"""

from __future__ import annotations

import numpy as np

from glow_core.graph.node import Constant, Node


def filled_with(x: Node, value: float) -> bool:
    """Whether ``x`` is known at compile time to hold ``value`` everywhere (a Splat or a
    Constant)."""
    if x.kind == "Splat":
        return bool(x.attrs["value"] == value)
    return isinstance(x, Constant) and bool(np.all(x.value == value))
