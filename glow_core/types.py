"""Element kinds and tensor types: the facts every stage agrees on.

A ``Type`` is immutable and hashable so nodes, instructions and caches can share and
compare them freely. Quantized int8 carries its scale and offset in the type, as in Glow,
so two int8 tensors with different quantization parameters are different types.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

from glow_core.errors import ShapeError


class ElemKind(enum.Enum):
    """The element kinds a tensor may hold; the value is the short name used in dumps."""

    float32 = "f32"
    float16 = "f16"
    bfloat16 = "bf16"
    float64 = "f64"
    int8 = "i8"
    int16 = "i16"
    int32 = "i32"
    int64 = "i64"
    uint8 = "u8"
    uint16 = "u16"
    uint32 = "u32"
    uint64 = "u64"
    bool = "bool"
    # Narrow storage kinds, one element per byte as ml_dtypes stores them (see ``NARROW_KINDS``).
    float8_e4m3fn = "f8e4m3fn"
    float8_e4m3fnuz = "f8e4m3fnuz"
    float8_e5m2 = "f8e5m2"
    float8_e5m2fnuz = "f8e5m2fnuz"
    float8_e8m0fnu = "f8e8m0fnu"
    float4_e2m1fn = "f4e2m1fn"
    int4 = "i4"
    uint4 = "u4"
    int2 = "i2"
    uint2 = "u2"

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype that stores this kind (bfloat16 and the narrow kinds via ml_dtypes)."""
        return _DTYPES[self]

    @property
    def is_float(self) -> bool:
        """A float kind glow computes with (float8/float4 are narrow storage kinds, not these)."""
        return self in FLOAT_KINDS

    @property
    def is_narrow(self) -> bool:
        """A storage kind (float8, float4, int4, int2...): held and moved, never computed with."""
        return self in NARROW_KINDS

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @classmethod
    def from_dtype(cls, dtype: np.dtype | type) -> ElemKind:
        """The kind stored as ``dtype``; raises KeyError for dtypes glow has no kind for."""
        return _KINDS_BY_DTYPE[np.dtype(dtype)]

    @classmethod
    def parse(cls, short: str) -> ElemKind:
        """The kind whose short name (``f32``) or long name (``float32``) is ``short``."""
        for kind in cls:
            if short in (kind.value, kind.name):
                return kind
        raise ValueError(f"unknown element kind {short!r}")


_DTYPES: dict[ElemKind, np.dtype] = {
    ElemKind.float32: np.dtype(np.float32),
    ElemKind.float16: np.dtype(np.float16),
    ElemKind.bfloat16: np.dtype(ml_dtypes.bfloat16),
    ElemKind.float64: np.dtype(np.float64),
    ElemKind.int8: np.dtype(np.int8),
    ElemKind.int16: np.dtype(np.int16),
    ElemKind.int32: np.dtype(np.int32),
    ElemKind.int64: np.dtype(np.int64),
    ElemKind.uint8: np.dtype(np.uint8),
    ElemKind.uint16: np.dtype(np.uint16),
    ElemKind.uint32: np.dtype(np.uint32),
    ElemKind.uint64: np.dtype(np.uint64),
    ElemKind.bool: np.dtype(np.bool_),
    ElemKind.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    ElemKind.float8_e4m3fnuz: np.dtype(ml_dtypes.float8_e4m3fnuz),
    ElemKind.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    ElemKind.float8_e5m2fnuz: np.dtype(ml_dtypes.float8_e5m2fnuz),
    ElemKind.float8_e8m0fnu: np.dtype(ml_dtypes.float8_e8m0fnu),
    ElemKind.float4_e2m1fn: np.dtype(ml_dtypes.float4_e2m1fn),
    ElemKind.int4: np.dtype(ml_dtypes.int4),
    ElemKind.uint4: np.dtype(ml_dtypes.uint4),
    ElemKind.int2: np.dtype(ml_dtypes.int2),
    ElemKind.uint2: np.dtype(ml_dtypes.uint2),
}
_KINDS_BY_DTYPE = {dtype: kind for kind, dtype in _DTYPES.items()}

FLOAT_KINDS = frozenset({ElemKind.float32, ElemKind.float16, ElemKind.bfloat16, ElemKind.float64})
SIGNED_INT_KINDS = frozenset({ElemKind.int8, ElemKind.int16, ElemKind.int32, ElemKind.int64})
UNSIGNED_INT_KINDS = frozenset({ElemKind.uint8, ElemKind.uint16, ElemKind.uint32, ElemKind.uint64})
INT_KINDS = SIGNED_INT_KINDS | UNSIGNED_INT_KINDS
NARROW_FLOAT_KINDS = frozenset(
    {
        ElemKind.float8_e4m3fn,
        ElemKind.float8_e4m3fnuz,
        ElemKind.float8_e5m2,
        ElemKind.float8_e5m2fnuz,
        ElemKind.float8_e8m0fnu,
        ElemKind.float4_e2m1fn,
    }
)
NARROW_INT_KINDS = frozenset({ElemKind.int4, ElemKind.uint4, ElemKind.int2, ElemKind.uint2})
NARROW_KINDS = NARROW_FLOAT_KINDS | NARROW_INT_KINDS
"""Storage kinds narrower than their byte: no arithmetic primitive declares them, so no backend
needs a kernel for them. Only BitCast (to and from uint8) reaches them; conversions are lowered
to uint8 table lookups and integer rounding (``glow_core.narrow``)."""
ALL_KINDS = frozenset(ElemKind)


@dataclass(frozen=True, slots=True)
class Type:
    """A tensor type: static shape, element kind, and quantization parameters for int8."""

    shape: tuple[int, ...]
    elem: ElemKind = ElemKind.float32
    scale: float | None = None
    offset: int | None = None

    def __post_init__(self) -> None:
        if any((not isinstance(d, int | np.integer)) or d < 0 for d in self.shape):
            # A ShapeError, not a ValueError: a negative dimension computed from a model's
            # values (a Tile repeat of -1) is the model's fault, reported with the node.
            raise ShapeError(f"shape dimensions must be non-negative ints, got {self.shape}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.elem.itemsize

    @property
    def dtype(self) -> np.dtype:
        return self.elem.dtype

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> Type:
        """The same element kind (and quantization) with another shape."""
        return replace(self, shape=tuple(shape))

    def with_elem(self, elem: ElemKind) -> Type:
        """The same shape with another element kind (quantization dropped)."""
        return Type(self.shape, elem)

    @classmethod
    def of(cls, array: np.ndarray) -> Type:
        """The type of a numpy array."""
        return cls(tuple(array.shape), ElemKind.from_dtype(array.dtype))

    @classmethod
    def parse(cls, text: str) -> Type:
        """Parse the compact form ``f32[4,3]`` (as used in primitive examples)."""
        kind, _, dims = text.partition("[")
        shape = tuple(int(d) for d in dims.rstrip("]").split(",") if d.strip())
        return cls(shape, ElemKind.parse(kind))

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        # Exact (repr reads back to the same double): types are compared through their text.
        quant = "" if self.scale is None else f", scale={float(self.scale)!r}"
        quant += "" if self.offset is None else f", offset={self.offset}"
        return f"{self.elem.value}<{dims}{quant}>"
