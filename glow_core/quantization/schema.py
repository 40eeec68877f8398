"""Scale and offset choice: how a real range [low, high] maps onto an integer kind.

A quantized value q stands for ``(q - offset) * scale``. Every schema makes 0.0 exactly
representable (zero padding, Relu and Max would otherwise shift every value they touch),
so the range is first widened to include 0. The four schemas follow Glow's:

- ``asymmetric``: int8 with an offset, the full range used (best resolution, but every
  product needs the offset subtracted);
- ``symmetric``: int8, offset 0, scale from max(|low|, |high|) (cheaper arithmetic, up to
  one bit lost on one-sided ranges);
- ``symmetric-uint8``: symmetric, except that a range with no negative values uses uint8
  [0, 255] with offset 0 (Relu outputs keep their eighth bit);
- ``pow2``: symmetric int8 whose scale is a power of two, so a requantization is a shift.

Weights are always quantized symmetrically to int8 (``weight_params``): their offsets would
add a term per output to every convolution, and their ranges are near symmetric anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from glow_core.errors import GlowError
from glow_core.types import ElemKind

Schema = Literal["asymmetric", "symmetric", "symmetric-uint8", "pow2"]
SCHEMAS: tuple[Schema, ...] = ("asymmetric", "symmetric", "symmetric-uint8", "pow2")

_SMALLEST_SCALE = 2.0**-32
"""A range of width 0 (a constant activation) still needs a positive scale."""


class QuantizationError(GlowError):
    """A quantization request cannot be met (unknown schema, a profile that does not fit)."""


@dataclass(frozen=True, slots=True)
class QuantParams:
    """How one tensor is quantized: ``real = (q - offset) * scale`` in ``elem`` (int8/uint8).
    Per-channel weight scales are arrays (``weight_params``), not these."""

    scale: float
    offset: int
    elem: ElemKind = ElemKind.int8

    @property
    def qmin(self) -> int:
        return int(np.iinfo(self.elem.dtype).min)

    @property
    def qmax(self) -> int:
        return int(np.iinfo(self.elem.dtype).max)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """``x`` in this kind, rounded half to even and saturated (numpy, float64)."""
        q = np.rint(np.asarray(x, np.float64) / self.scale) + self.offset
        return np.clip(q, self.qmin, self.qmax).astype(self.elem.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return (np.asarray(q, np.float64) - self.offset) * self.scale

    def to_json(self) -> dict[str, object]:
        return {"scale": self.scale, "offset": self.offset, "elem": self.elem.name}


def check_schema(schema: str) -> Schema:
    """``schema`` if it is one of ``SCHEMAS``, else a QuantizationError naming them."""
    if schema not in SCHEMAS:
        raise QuantizationError(f"unknown quantization schema {schema!r}; choose one of {', '.join(SCHEMAS)}")
    return schema  # type: ignore[return-value]


def choose_params(low: float, high: float, schema: Schema = "asymmetric") -> QuantParams:
    """Scale and offset for real values in [low, high] under ``schema``."""
    check_schema(schema)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise QuantizationError(f"cannot quantize the range [{low}, {high}]: it must be finite and ordered")
    low, high = min(low, 0.0), max(high, 0.0)
    if schema == "asymmetric":
        scale = max((high - low) / 255.0, _SMALLEST_SCALE)
        # Offset rounded so that 0.0 maps exactly onto an integer; low lands within half a step.
        offset = int(np.clip(round(-128 - low / scale), -128, 127))
        return QuantParams(scale, offset, ElemKind.int8)
    if schema == "symmetric-uint8" and low >= 0.0:
        return QuantParams(max(high / 255.0, _SMALLEST_SCALE), 0, ElemKind.uint8)
    scale = max(max(-low, high) / 127.0, _SMALLEST_SCALE)
    if schema == "pow2":
        scale = 2.0 ** math.ceil(math.log2(scale))
    return QuantParams(scale, 0, ElemKind.int8)


def weight_params(weights: np.ndarray, axis: int | None, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 scales for ``weights`` (one per index of ``axis``, or one when None)
    and the int8 weights; pow2 scales under the pow2 schema."""
    w = np.asarray(weights, np.float64)
    if axis is None:
        reach = np.array([np.max(np.abs(w), initial=0.0)])
    else:
        others = tuple(i for i in range(w.ndim) if i != axis)
        reach = np.max(np.abs(w), axis=others, initial=0.0)
    scales = np.maximum(reach / 127.0, _SMALLEST_SCALE)
    if schema == "pow2":
        scales = 2.0 ** np.ceil(np.log2(scales))
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.rint(w / scales.reshape(shape)), -127, 127).astype(np.int8)
    return scales, q
