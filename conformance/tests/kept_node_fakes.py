"""Backends that keep high-level nodes, for the conformance cases generated for kept nodes.

``KeepsEveryNode`` is the interpreter keeping every node kind (its kernels are the nodes'
declared semantics, so it must pass); ``WrongGelu`` keeps Gelu with a kernel off by a
constant, as a fused kernel with a wrong bias term would be. The ``WRONG_LAYER_KERNELS``
fakes each keep one layer node whose kernel has one realistic bug, planted by running the
node's own semantics on a changed operand or attribute (a peephole never read, the other
GRU variant, a state never loaded, a filter never flipped, half a pixel off, a loop bound
off by one, pads swapped, count_include_pad inverted, p hard-wired, indices never
loaded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from conformance_fakes import SmallInterpreter

from glow_core.lowering.evaluate import node_semantics
from glow_core.spec import NODES
from glow_core.types import Type

GELU_ERROR = 0.01
"""What the wrong Gelu kernel adds to every element."""


class KeepsEveryNode(SmallInterpreter):
    """The interpreter keeping every high-level node kind and claiming each for float32, or
    for the kinds it is declared for when those are integer only (the int8 layers)."""

    name = "keeps-every-node"
    claims: ClassVar[dict[str, list[str] | None]] = {
        kind: ["float32"] if "float32" in {k.name for k in spec.kinds} else sorted(k.name for k in spec.kinds)
        for kind, spec in NODES.items()
    }

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


Plant = Callable[[list[np.ndarray], dict[str, Any]], tuple[list[np.ndarray], dict[str, Any]]]
"""Changes a kept node's operands and attributes before its semantics run: the planted bug."""


def _semantics_with(kind: str, plant: Plant) -> Callable[[Callable[..., Any] | None], Callable[..., Any]]:
    """A ``broken`` entry: the node's declared semantics, run on what ``plant`` makes of
    the operands and attributes the instruction carries."""

    def wrong(reference: Callable[..., Any] | None) -> Callable[..., Any]:
        def kernel(*operands: Any, **attrs: Any) -> np.ndarray:
            given = operands[0] if NODES[kind].variadic else operands  # Einsum gets one list
            arrays, changed = plant([np.asarray(a) for a in given], dict(attrs))
            types = [Type.of(a) for a in arrays]
            return node_semantics(NODES[kind], types, changed)(arrays)

        return kernel

    return wrong


def _zeroed(name: str, kind: str) -> Plant:
    """Operand ``name`` read as zeros: a kernel that never loads it."""
    position = NODES[kind].operands.index(name)

    def plant(arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, Any]]:
        arrays[position] = np.zeros_like(arrays[position])
        return arrays, attrs

    return plant


def _flipped(attr: str) -> Plant:
    """A 0/1 attribute read inverted: the kernel implements the other variant."""

    def plant(arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, Any]]:
        return arrays, {**attrs, attr: 1 - attrs[attr]}

    return plant


def _unflipped_filter(
    arrays: list[np.ndarray], attrs: dict[str, Any]
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """ConvTranspose's filter read with every spatial axis reversed: a kernel that forgot the
    flip between a transposed convolution and a plain one (a symmetric filter would hide it)."""
    filter = arrays[1]
    arrays[1] = np.ascontiguousarray(
        filter[(slice(None), slice(None), *([slice(None, None, -1)] * (filter.ndim - 2)))]
    )
    return arrays, attrs


Shows = Callable[[tuple[Type, ...], dict[str, Any]], bool]
"""For which operand types and attributes a planted bug changes the result (random values)."""


def _always(types: tuple[Type, ...], attrs: dict[str, Any]) -> bool:
    return True


def _flip_shows(types: tuple[Type, ...], attrs: dict[str, Any]) -> bool:
    """A filter flip changes the result only when some spatial kernel dim exceeds 1."""
    return max(types[1].shape[2:]) > 1


def _other_coordinates(
    arrays: list[np.ndarray], attrs: dict[str, Any]
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Resize's coordinate transform mixed up: half_pixel read as asymmetric, every other
    mode as half_pixel (the classic off-by-half-a-pixel resize)."""
    mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    return arrays, {
        **attrs,
        "coordinate_transformation_mode": "asymmetric" if mode == "half_pixel" else "half_pixel",
    }


def _coordinates_show(types: tuple[Type, ...], attrs: dict[str, Any]) -> bool:
    """Coordinates matter where an axis of more than one element is resampled."""
    return any(d > 1 and out != d for d, out in zip(types[0].shape, attrs["sizes"], strict=True))


def _last_slice_dropped(arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple[list[np.ndarray], dict]:
    """The last operand's last slice along its last axis read as zeros: a loop bound off by one."""
    last = arrays[-1].copy()
    last[..., -1] = 0
    return [*arrays[:-1], last], attrs


def _pads_swapped(arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, Any]]:
    """A pooling kernel that pads the end by the begin pads and the begin by the end pads."""
    pads = attrs["pads"]
    d = len(pads) // 2
    return arrays, {**attrs, "pads": (*pads[d:], *pads[:d])}


def _pads_uneven(types: tuple[Type, ...], attrs: dict[str, Any]) -> bool:
    """Swapped pads change the values where a spatial dim of more than one element is padded
    unevenly (a single element is in every window either way); with ceil_mode they may change
    the output's shape instead (the case fails as a crash, not by a relative error)."""
    pads, size = attrs["pads"], types[0].shape[2:]
    return not attrs.get("ceil_mode") and any(
        n > 1 and pads[i] != pads[i + len(size)] for i, n in enumerate(size)
    )


def _pads_counted(arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, Any]]:
    """An average kernel reading count_include_pad inverted (divides by the wrong count)."""
    return arrays, {**attrs, "count_include_pad": not attrs.get("count_include_pad", False)}


def _padded(types: tuple[Type, ...], attrs: dict[str, Any]) -> bool:
    """Counting pads or not matters only where there are pads."""
    return any(attrs["pads"])


def _other_norm(arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, Any]]:
    """An Lp kernel with p hard-wired to 2 (p = 2 itself read as 1)."""
    return arrays, {**attrs, "p": 1 if attrs.get("p", 2) == 2 else 2}


def _keeping(kind: str, bug: str, plant: Plant, shows: Shows = _always) -> type[SmallInterpreter]:
    """A fake that keeps ``kind`` (claimed for float32) with ``plant`` as its kernel's bug;
    ``shows`` says for which operand types the bug changes the result (random values)."""
    return type(
        f"Wrong{kind}",
        (SmallInterpreter,),
        {
            "__doc__": f"Keeps {kind}; its kernel {bug}.",
            "name": f"wrong-{kind.lower()}",
            "claims": {kind: ["float32"]},
            "broken": {kind: _semantics_with(kind, plant)},
            "bug_shows": staticmethod(shows),
            "__init__": lambda self: SmallInterpreter.__init__(self, keep=(kind,)),
        },
    )


WRONG_LAYER_KERNELS = {
    "LSTM": _keeping("LSTM", "never reads the peepholes", _zeroed("peephole", "LSTM")),
    "GRU": _keeping("GRU", "applies the reset on the wrong side of R", _flipped("linear_before_reset")),
    "RNN": _keeping("RNN", "starts from zeros, not initial_h", _zeroed("initial_h", "RNN")),
    "ConvTranspose": _keeping("ConvTranspose", "does not flip the filter", _unflipped_filter, _flip_shows),
    "Resize": _keeping("Resize", "mixes up coordinate transforms", _other_coordinates, _coordinates_show),
    "Einsum": _keeping("Einsum", "stops one short on the last operand's last axis", _last_slice_dropped),
    "MaxPoolNd": _keeping("MaxPoolNd", "swaps begin and end pads", _pads_swapped, _pads_uneven),
    "AvgPoolNd": _keeping("AvgPoolNd", "reads count_include_pad inverted", _pads_counted, _padded),
    "LpPool": _keeping("LpPool", "hard-wires p", _other_norm),
    "MaxUnpool": _keeping("MaxUnpool", "never loads the indices", _zeroed("indices", "MaxUnpool")),
}
"""Kept layer kind -> a fake backend whose kernel for it has one planted bug."""

KEPT_NODE_FAKES = (KeepsEveryNode, WrongGelu, *WRONG_LAYER_KERNELS.values())
