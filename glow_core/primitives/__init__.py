"""THE contract: every primitive, declared once.

A primitive is what a backend must implement. Each declaration holds its operands,
attributes, type rule (which is also its verifier), numpy reference semantics (float64 where
precision matters; the interpreter runs these and the conformance suite uses them as an
oracle), the element kinds it is defined for, traits read by passes, and the examples
conformance builds. The declarations are grouped by family in the modules of this package;
importing the package registers them all in ``glow_core.spec.PRIMITIVES``.

The core set (``CORE``, marked ``core = True`` on each declaration) is small on purpose:
every high-level node (``glow_core.graph.nodes``) lowers into it and the views, so a
backend implementing only these runs every supported model.
"""

from glow_core.primitives import bits, compare, elementwise, indexing, linalg, movement, scan, unary, window  # noqa: F401 - register every declaration
from glow_core.primitives.elementwise import Add, Div, Erf, Exp, Log, Max, Min, Mul, Pow, Sqrt, Sub, Tanh
from glow_core.primitives.kinds import INDEX_KINDS, NUMERIC_KINDS
from glow_core.primitives.linalg import BatchMatMul, MatMul, ReduceMax, ReduceSum
from glow_core.primitives.movement import (
    Broadcast,
    Concat,
    Convert,
    Gather,
    Pad,
    Reshape,
    Slice,
    Splat,
    Transpose,
)
from glow_core.primitives.window import AvgPool, Convolution, MaxPool
from glow_core.spec import PRIMITIVES

CORE = frozenset(name for name, spec in PRIMITIVES.items() if spec.core)
"""The core primitive set: the kernels every backend implements (``core = True`` on the
declaration). Every high-level node lowers into these and views, the model zoo needs
nothing else, and they run most of the ONNX node tests glow passes (the SDK template
implements exactly these; tests check all three). Chosen by measurement: a primitive is core
when a lowering or a zoo model needs it, or when at least 1% of the node tests the reference
interpreter passes need it and nothing else outside the set (docs/writing-a-backend.md
gives the figures). The others (Sin, Cos, Atan, TopK) serve the remaining ONNX operators."""

VIEWS = frozenset(name for name, spec in PRIMITIVES.items() if spec.view)
"""Primitives IRGen makes views of their operand's bytes (Reshape, BitCast): the core handles
them for every backend, so no backend declares or implements them."""

ELEMENTWISE = frozenset(name for name, spec in PRIMITIVES.items() if spec.elementwise)
"""Names of the element-wise primitives, computed from the declarations."""

__all__ = [
    "CORE",
    "ELEMENTWISE",
    "INDEX_KINDS",
    "NUMERIC_KINDS",
    "PRIMITIVES",
    "VIEWS",
    "Add",
    "AvgPool",
    "BatchMatMul",
    "Broadcast",
    "Concat",
    "Convert",
    "Convolution",
    "Div",
    "Erf",
    "Exp",
    "Gather",
    "Log",
    "MatMul",
    "Max",
    "MaxPool",
    "Min",
    "Mul",
    "Pad",
    "Pow",
    "ReduceMax",
    "ReduceSum",
    "Reshape",
    "Slice",
    "Splat",
    "Sqrt",
    "Sub",
    "Tanh",
    "Transpose",
    "elementwise",
    "linalg",
    "movement",
    "window",
]
