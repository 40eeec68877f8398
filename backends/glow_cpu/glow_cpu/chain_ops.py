"""A fused element-wise chain as data: each operation, and how it reads its operands.

The fusion planner (``fusion.py``) builds these and the kernels (``kernels/chain.py``,
``kernels/elementwise.py``) emit them; they live apart from both so the planner can read
the kernels' own table of element-wise kinds without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from glow_core.ir.instructions import Value


@dataclass(frozen=True)
class Access:
    """How an element-wise operation reads one operand at a destination index: the running
    value of the chain, a constant, or a buffer with element strides over the destination's
    dimensions (0 where it is broadcast)."""

    kind: str  # "chain", "splat" or "buffer"
    value: Value | None = None  # the buffer read (a broadcast's source for a virtual one)
    strides: tuple[int, ...] = ()
    constant: float = 0.0


CHAIN = Access("chain")


@dataclass(frozen=True)
class Op:
    """One fused element-wise operation."""

    kind: str
    name: str
    operands: tuple[Access, ...]
