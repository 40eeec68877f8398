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

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype that stores this kind (bfloat16 via ml_dtypes)."""
        return _DTYPES[self]

    @property
    def is_float(self) -> bool:
        return self in FLOAT_KINDS

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
}
_KINDS_BY_DTYPE = {dtype: kind for kind, dtype in _DTYPES.items()}

FLOAT_KINDS = frozenset({ElemKind.float32, ElemKind.float16, ElemKind.bfloat16, ElemKind.float64})
SIGNED_INT_KINDS = frozenset({ElemKind.int8, ElemKind.int16, ElemKind.int32, ElemKind.int64})
UNSIGNED_INT_KINDS = frozenset({ElemKind.uint8, ElemKind.uint16, ElemKind.uint32, ElemKind.uint64})
INT_KINDS = SIGNED_INT_KINDS | UNSIGNED_INT_KINDS
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
            raise ValueError(f"shape dimensions must be non-negative ints, got {self.shape}")
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
        quant = f", scale={self.scale:g}, offset={self.offset}" if self.scale is not None else ""
        return f"{self.elem.value}<{dims}{quant}>"
