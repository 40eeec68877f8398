"""THE contract: every primitive, declared once.

A primitive is what a backend must implement. Each declaration holds its operands,
attributes, type rule (which is also its verifier), numpy reference semantics (float64 where
precision matters; the interpreter runs these and the conformance suite uses them as an
oracle), the element kinds it is defined for, traits read by passes, and the examples
conformance builds. The declarations are grouped by family in the modules of this package;
importing the package registers them all in ``glow_core.spec.PRIMITIVES``.

The set is small on purpose: every high-level node (``glow_core.graph.nodes``) lowers into
these, so a backend implementing only these runs every supported model.
"""

from glow_core.primitives import bits, compare, elementwise, indexing, linalg, movement, scan, unary, window  # noqa: F401 - register ONNX-coverage primitives
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
from glow_core.spec import PRIMITIVES, OpSpec

CORE_FAMILIES = (elementwise, movement, linalg, window)
"""The families of the core primitive set. Every high-level node lowers into these, and the
ONNX loader emits only these for the model zoo, so a backend implementing them runs every
zoo model (the SDK template implements exactly these; tests check both facts). The other
families serve ONNX operators beyond that."""

CORE = frozenset(
    name for family in CORE_FAMILIES for name, value in vars(family).items() if isinstance(value, OpSpec)
)
"""Names of the core primitives, computed from the families above."""

ELEMENTWISE = frozenset(name for name, spec in PRIMITIVES.items() if spec.elementwise)
"""Names of the element-wise primitives, computed from the declarations."""

__all__ = [
    "CORE",
    "CORE_FAMILIES",
    "ELEMENTWISE",
    "INDEX_KINDS",
    "NUMERIC_KINDS",
    "PRIMITIVES",
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
