"""Input classes: the values kernels get wrong, declared once per element kind.

Random normal floats and small integers never reach the paths where kernels differ from the
spec: NaN propagation, infinities, the sign of zero, denormals, overflow, and integers too
wide for a float mantissa. Each ``InputClass`` names such a set of values; every primitive
case of a claimed element kind gets one case per class that applies to it
(``Add[float32-4x5_4x5-values=nan]``), with the class's values planted among the
declaration's own sample. The reference's answer on those inputs is the spec (IEEE 754 and
numpy, as ``onnx.reference`` computes): a class the reference refuses for an operator
(NaN converted to an integer, which ONNX leaves undefined) yields no case for it.

Two facts limit what a class can demand (``ORDER_OPEN``, ``ZERO_SIGN_OPEN``): where a result
combines many values in an order the spec leaves open (a sum, a dot product), overflow of
finite values and the sign of a zero result depend on that order, so those operators get no
``huge`` case and their zero signs are not compared; IEEE 754 also leaves the maximum of -0
and +0 open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from glow_core.types import ElemKind

PLANT_SHARE = 1 / 3
"""Share of an operand's elements that take a class's values; the rest keep the sample's,
so special values meet ordinary ones (NaN against a number is where a Max drops it)."""


@dataclass(frozen=True)
class InputClass:
    """A named set of values for the element kinds ``applies`` accepts."""

    name: str
    doc: str
    applies: Callable[[ElemKind], bool]
    values: Callable[[ElemKind], np.ndarray]
    fill: bool = False
    """Every element takes a class value (denormals: a flush to zero is only visible when
    nothing larger sets the scale of the comparison)."""

    def plant(self, rng: np.random.Generator, array: np.ndarray, elem: ElemKind) -> np.ndarray:
        """``array`` with a share of its elements (all, for ``fill``) replaced by class values."""
        values = self.values(elem)
        chosen = rng.choice(values, array.shape).astype(array.dtype)
        if self.fill or array.size <= 1:
            return chosen
        mask = rng.random(array.shape) < PLANT_SHARE
        mask.reshape(-1)[rng.integers(array.size)] = True  # at least one, whatever the draw
        return np.where(mask, chosen, array).astype(array.dtype)


def _finfo(elem: ElemKind) -> ml_dtypes.finfo:
    return ml_dtypes.finfo(elem.dtype)


def _floats(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def _denormals(elem: ElemKind) -> np.ndarray:
    info = _finfo(elem)
    tiny, least = float(info.smallest_normal), float(info.smallest_subnormal)
    magnitudes = _floats(least, 3 * least, tiny / 3, tiny / 2, tiny * 0.99, tiny, 2 * tiny)
    return np.concatenate([magnitudes, -magnitudes])


def _huge(elem: ElemKind) -> np.ndarray:
    """The largest finite values, and values that overflow through an operator: a sum or
    product of two (past max), exp (past log(max)), and exp's underflow to zero."""
    big = float(_finfo(elem).max)
    root, log = np.sqrt(big), np.log(big)
    return _floats(big, -big, big / 2, -big / 2, root * 1.5, -root * 1.5, log * 1.01, -log * 1.05)


def _limits(elem: ElemKind) -> np.ndarray:
    info = np.iinfo(elem.dtype)
    values = [info.min, info.min + 1, info.max, info.max - 1, 1]
    if info.min < 0:
        values.append(-1)
    return np.array(values, dtype=elem.dtype)


def _wide(elem: ElemKind) -> np.ndarray:
    """Integers a float32 (past 2**24) or float64 (past 2**53) path cannot hold exactly."""
    info = np.iinfo(elem.dtype)
    magnitudes = [2**24 + 1, 2**24 + 3, 3 * 2**23 + 1]
    if info.bits == 64:
        magnitudes += [2**53 + 1, 2**53 + 3, 2**60 + 1]
    values = magnitudes + ([-m for m in magnitudes] if info.min < 0 else [])
    return np.array(values, dtype=elem.dtype)


def _is_float(elem: ElemKind) -> bool:
    return elem.is_float


def _is_int(elem: ElemKind) -> bool:
    return elem.dtype.kind in "iu"


def _is_wide_int(elem: ElemKind) -> bool:
    return _is_int(elem) and np.iinfo(elem.dtype).bits >= 32


INPUT_CLASSES: tuple[InputClass, ...] = (
    InputClass(
        "nan", "NaN among numbers: it propagates (ONNX, IEEE 754)", _is_float, lambda e: _floats(np.nan)
    ),
    InputClass("inf", "+inf and -inf", _is_float, lambda e: _floats(np.inf, -np.inf)),
    InputClass("zero", "-0.0 and +0.0: the sign of zero survives", _is_float, lambda e: _floats(-0.0, 0.0)),
    InputClass("denormal", "subnormals and the smallest normals, alone", _is_float, _denormals, fill=True),
    InputClass(
        "huge", "the largest finite values, and values that overflow through the operator", _is_float, _huge
    ),
    InputClass("limits", "integers at the kind's limits (sums and products wrap)", _is_int, _limits),
    InputClass(
        "wide",
        "integers past 2**24 (and 2**53 for 64-bit kinds): exact, never through a float",
        _is_wide_int,
        _wide,
    ),
)
"""Every input class, by element kind; the one list the case generator reads."""

CLASSES_BY_NAME = {c.name: c for c in INPUT_CLASSES}

ORDER_OPEN = frozenset(
    {"MatMul", "BatchMatMul", "ReduceSum", "CumReduce", "Convolution", "AvgPool", "ScatterElements"}
)
"""Primitives whose results combine many values in an order the spec leaves open (and every
high-level node: it is computed by a lowering). Overflow of finite values depends on that
order (max + max - max is max or inf), so they get no ``huge`` case; NaN and inf do not."""

ZERO_SIGN_OPEN = ORDER_OPEN | {"Max", "Min", "ReduceMax", "MaxPool"}
"""Primitives whose sign of a zero result the spec leaves open: the order-open ones (a sum of
-0 and +0 depends on which comes first) and the maxima and minima (IEEE 754 leaves
max(-0, +0) to the implementation). Every other result's zero sign is compared."""

PENDING: dict[tuple[str, str], str] = {}
"""(primitive, class) pairs not generated yet, each with why."""


def classes_for(kind: str, operand_kinds: Iterable[ElemKind], is_primitive: bool) -> list[InputClass]:
    """The input classes a case of ``kind`` gets: those that apply to one of its operands'
    element kinds (Convert from float32 to int32 gets the float classes)."""
    kinds = set(operand_kinds)
    order_open = kind in ORDER_OPEN or not is_primitive
    return [
        c
        for c in INPUT_CLASSES
        if any(c.applies(k) for k in kinds)
        and (kind, c.name) not in PENDING
        and not (order_open and c.name == "huge")
    ]


def first_operand_only(input_class: InputClass, kind: str, is_primitive: bool) -> bool:
    """Whether the class's values go into the first operand it applies to, not every one:
    for a ``fill`` class (a product of two denormals is 0, a denormal times a number is the
    denormal a flush to zero loses), and for the order-open operators, whose kernels may
    skip padding or structurally zero terms (a convolution that never multiplies its zero
    padding by an infinite weight gives inf where the padded reference gives NaN)."""
    return input_class.fill or kind in ORDER_OPEN or not is_primitive


def zero_sign_checked(kind: str, is_primitive: bool) -> bool:
    """Whether the sign of a zero result of ``kind`` is part of its spec."""
    return is_primitive and kind not in ZERO_SIGN_OPEN
