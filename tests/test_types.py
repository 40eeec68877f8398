"""Element kinds and tensor types: dtype mapping, sizes, printing, parsing, validation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from glow_core.errors import ShapeError
from glow_core.types import ALL_KINDS, FLOAT_KINDS, INT_KINDS, NARROW_KINDS, ElemKind, Type

DTYPES = {
    ElemKind.float32: np.float32,
    ElemKind.float16: np.float16,
    ElemKind.bfloat16: ml_dtypes.bfloat16,
    ElemKind.float64: np.float64,
    ElemKind.int8: np.int8,
    ElemKind.int16: np.int16,
    ElemKind.int32: np.int32,
    ElemKind.int64: np.int64,
    ElemKind.uint8: np.uint8,
    ElemKind.uint16: np.uint16,
    ElemKind.uint32: np.uint32,
    ElemKind.uint64: np.uint64,
    ElemKind.bool: np.bool_,
    **{kind: getattr(ml_dtypes, kind.name) for kind in NARROW_KINDS},  # named as ml_dtypes names them
}


@pytest.mark.parametrize("kind", list(ElemKind), ids=lambda k: k.value)
def test_elem_kind_dtype_round_trip(kind: ElemKind) -> None:
    """Every kind maps to its numpy dtype, and that dtype maps back to the kind."""
    assert kind.dtype == np.dtype(DTYPES[kind])
    assert ElemKind.from_dtype(DTYPES[kind]) is kind
    assert ElemKind.from_dtype(np.dtype(DTYPES[kind])) is kind
    assert kind.itemsize == np.dtype(DTYPES[kind]).itemsize


def test_bfloat16_is_ml_dtypes() -> None:
    """bfloat16 is stored as ml_dtypes.bfloat16: two bytes, a float kind."""
    kind = ElemKind.bfloat16
    assert kind.dtype == np.dtype(ml_dtypes.bfloat16)
    assert kind.itemsize == 2
    assert kind.is_float
    assert Type.of(np.zeros((2, 3), ml_dtypes.bfloat16)) == Type((2, 3), ElemKind.bfloat16)


def test_kind_sets() -> None:
    """Float and int kinds partition the numeric kinds; bool is neither."""
    assert {ElemKind.float32, ElemKind.float16, ElemKind.bfloat16, ElemKind.float64} == FLOAT_KINDS
    signed = {ElemKind.int8, ElemKind.int16, ElemKind.int32, ElemKind.int64}
    assert signed | {ElemKind.uint8, ElemKind.uint16, ElemKind.uint32, ElemKind.uint64} == INT_KINDS
    assert not FLOAT_KINDS & INT_KINDS
    assert set(ElemKind) == ALL_KINDS
    assert {ElemKind.bool} == ALL_KINDS - FLOAT_KINDS - INT_KINDS - NARROW_KINDS
    assert not NARROW_KINDS & (FLOAT_KINDS | INT_KINDS)
    assert all(k.is_float == (k in FLOAT_KINDS) for k in ElemKind)


def test_unknown_dtype_and_name_rejected() -> None:
    """A dtype or a name glow has no kind for is refused."""
    with pytest.raises(KeyError):
        ElemKind.from_dtype(np.complex64)
    with pytest.raises(KeyError):
        ElemKind.from_dtype(ml_dtypes.float6_e2m3fn)
    with pytest.raises(ValueError, match="unknown element kind"):
        ElemKind.parse("f13")


@pytest.mark.parametrize("kind", list(ElemKind), ids=lambda k: k.value)
def test_elem_kind_parse_short_and_long(kind: ElemKind) -> None:
    """Both ``f32`` and ``float32`` name float32 (and likewise for every kind)."""
    assert ElemKind.parse(kind.value) is kind
    assert ElemKind.parse(kind.name) is kind


@pytest.mark.parametrize(
    ("shape", "kind", "size", "nbytes"),
    [
        ((4, 3), ElemKind.float32, 12, 48),
        ((), ElemKind.float32, 1, 4),
        ((2, 0, 5), ElemKind.int64, 0, 0),
        ((7,), ElemKind.float16, 7, 14),
        ((3, 5), ElemKind.bfloat16, 15, 30),
        ((2, 2, 2), ElemKind.int8, 8, 8),
        ((6,), ElemKind.bool, 6, 6),
        ((1, 1, 9), ElemKind.int32, 9, 36),
    ],
)
def test_size_and_nbytes(shape: tuple[int, ...], kind: ElemKind, size: int, nbytes: int) -> None:
    """size is the element count, nbytes the element count times the item size."""
    t = Type(shape, kind)
    assert t.size == size
    assert t.nbytes == nbytes
    assert t.rank == len(shape)
    assert t.dtype == kind.dtype
    assert t.nbytes == np.zeros(shape, kind.dtype).nbytes


def test_str() -> None:
    """Types print as ``kind<dims>``, with quantization parameters when present."""
    assert str(Type((4, 3))) == "f32<4x3>"
    assert str(Type(())) == "f32<>"
    assert str(Type((2,), ElemKind.int64)) == "i64<2>"
    assert str(Type((2, 3), ElemKind.int8, scale=0.5, offset=-3)) == "i8<2x3, scale=0.5, offset=-3>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("f32[4,3]", Type((4, 3))),
        ("f32[]", Type(())),
        ("i64[7]", Type((7,), ElemKind.int64)),
        ("bf16[2, 3, 4]", Type((2, 3, 4), ElemKind.bfloat16)),
        ("float16[5]", Type((5,), ElemKind.float16)),
        ("bool[1,1]", Type((1, 1), ElemKind.bool)),
    ],
)
def test_parse(text: str, expected: Type) -> None:
    """The compact ``f32[4,3]`` form (short or long kind name) parses to the type."""
    assert Type.parse(text) == expected


def test_parse_bad_kind() -> None:
    """An unknown kind in the compact form is refused."""
    with pytest.raises(ValueError):
        Type.parse("q7[3]")


def test_with_shape_keeps_kind_and_quantization() -> None:
    """with_shape changes only the shape; with_elem changes the kind and drops quantization."""
    q = Type((2, 3), ElemKind.int8, scale=0.25, offset=4)
    r = q.with_shape((6,))
    assert r == Type((6,), ElemKind.int8, scale=0.25, offset=4)
    assert q.shape == (2, 3), "types are immutable"
    assert q.with_shape([3, 2]).shape == (3, 2)
    f = q.with_elem(ElemKind.float32)
    assert f == Type((2, 3))
    assert f.scale is None and f.offset is None


def test_equality_and_hash() -> None:
    """Types are values: equal fields are equal and hash alike; quantization distinguishes."""
    a = Type((2, 3))
    assert a == Type((2, 3), ElemKind.float32)
    assert hash(a) == hash(Type((2, 3)))
    assert a != Type((3, 2))
    assert a != Type((2, 3), ElemKind.float16)
    assert Type((2,), ElemKind.int8, 0.5, 1) != Type((2,), ElemKind.int8, 0.25, 1)
    assert len({a, Type((2, 3)), Type((3, 2))}) == 2


def test_numpy_integer_dims_normalized() -> None:
    """numpy integer dimensions are accepted and stored as plain ints."""
    t = Type((np.int64(3), np.int32(4)))
    assert t.shape == (3, 4)
    assert all(type(d) is int for d in t.shape)
    assert t == Type((3, 4))


def test_of_array() -> None:
    """Type.of reads shape and kind off an array."""
    assert Type.of(np.zeros((2, 5), np.int32)) == Type((2, 5), ElemKind.int32)
    assert Type.of(np.float32(1.0).reshape(())) == Type(())


@pytest.mark.parametrize("shape", [(-1,), (3, -2), (2.0,), ("3",), (None,), (1.5, 2)])
def test_bad_shapes_rejected(shape: tuple) -> None:
    """Negative, fractional or non-integer dimensions are refused at construction."""
    with pytest.raises(ShapeError, match="non-negative ints"):
        Type(shape)


def test_frozen() -> None:
    """A Type cannot be mutated in place."""
    t = Type((2,))
    with pytest.raises(AttributeError):
        t.shape = (3,)  # type: ignore[misc]
