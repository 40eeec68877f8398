"""Backends that keep high-level nodes, for the conformance cases generated for kept nodes.

``KeepsEveryNode`` is the interpreter keeping every node kind (its kernels are the nodes'
declared semantics, so it must pass); ``WrongGelu`` keeps Gelu with a kernel off by a
constant, as a fused kernel with a wrong bias term would be.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from conformance_fakes import SmallInterpreter

from glow_core.spec import NODES

GELU_ERROR = 0.01
"""What the wrong Gelu kernel adds to every element."""


class KeepsEveryNode(SmallInterpreter):
    """The interpreter keeping every high-level node kind and claiming each for float32."""

    name = "keeps-every-node"
    claims: ClassVar[dict[str, list[str] | None]] = {kind: ["float32"] for kind in NODES}

    def __init__(self) -> None:
        super().__init__(keep=tuple(NODES))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_off_by_a_constant(reference: Callable[..., Any] | None) -> Callable[..., Any]:
    def gelu(input: np.ndarray, approximate: str) -> np.ndarray:
        x = input.astype(np.float64)
        if approximate == "tanh":
            exact = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        else:
            exact = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
        return exact + GELU_ERROR

    return gelu


class WrongGelu(SmallInterpreter):
    """Keeps Gelu, and its Gelu kernel adds 0.01 to every element."""

    name = "wrong-gelu"
    claims: ClassVar[dict[str, list[str] | None]] = {"Gelu": ["float32"], "LayerNorm": ["float32"]}
    broken: ClassVar[dict[str, Callable[..., Any]]] = {"Gelu": _gelu_off_by_a_constant}

    def __init__(self) -> None:
        super().__init__(keep=("Gelu", "LayerNorm"))


KEPT_NODE_FAKES = (KeepsEveryNode, WrongGelu)
