"""Shape rules by property (hypothesis): each type rule accepts exactly what its reference computes."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from primitive_cases import HYPOTHESIS, evaluate, infer, naive_conv, seed_of

from glow_core.accuracy import relative_error
from glow_core.errors import ShapeError
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type

# ---- hypothesis: shape rules ----------------------------------------------------------

small_shapes = st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple)


@HYPOTHESIS
@given(small_shapes, small_shapes)
def test_broadcast_type_is_numpy_broadcast(xshape: tuple, shape: tuple) -> None:
    """Broadcast's type rule accepts exactly when np.broadcast_shapes(x, shape) == shape."""
    spec = PRIMITIVES["Broadcast"]
    try:
        ok = np.broadcast_shapes(xshape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        with pytest.raises(ShapeError):
            infer(spec, [Type(xshape)], {"shape": shape})
        return
    t = infer(spec, [Type(xshape)], {"shape": shape})
    assert t == Type(shape)
    x = np.ones(xshape, np.float32)
    assert evaluate(spec, [x], {"shape": shape}).shape == shape


matmul_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


@HYPOTHESIS
@given(matmul_shapes, matmul_shapes)
def test_matmul_type_rule_accepts_exactly_compatible(a: tuple, b: tuple) -> None:
    """MatMul accepts [m,k] x [k,n] and nothing else."""
    spec = PRIMITIVES["MatMul"]
    ok = len(a) == len(b) == 2 and a[1] == b[0]
    if not ok:
        with pytest.raises(ShapeError):
            infer(spec, [Type(a), Type(b)], {})
        return
    t = infer(spec, [Type(a), Type(b)], {})
    assert t.shape == (a[0], b[1]) == np.matmul(np.ones(a), np.ones(b)).shape


@HYPOTHESIS
@given(matmul_shapes, matmul_shapes)
def test_batch_matmul_type_rule_accepts_exactly_compatible(a: tuple, b: tuple) -> None:
    """BatchMatMul accepts [b,m,k] x [b,k,n] (equal batch) and nothing else."""
    spec = PRIMITIVES["BatchMatMul"]
    ok = len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1]
    if not ok:
        with pytest.raises(ShapeError):
            infer(spec, [Type(a), Type(b)], {})
        return
    t = infer(spec, [Type(a), Type(b)], {})
    assert t.shape == (a[0], a[1], b[2])
    assert evaluate(spec, [np.ones(a, np.float32), np.ones(b, np.float32)], {}).shape == t.shape


@pytest.mark.parametrize("kind", ["MatMul", "BatchMatMul"])
def test_matmul_refuses_mixed_element_kinds(kind: str) -> None:
    """Operands of different element kinds are refused."""
    shape = (2, 3, 3) if kind == "BatchMatMul" else (3, 3)
    with pytest.raises(ShapeError, match="element kinds differ"):
        infer(PRIMITIVES[kind], [Type(shape), Type(shape, ElemKind.float16)], {})


@st.composite
def conv_configs(draw: st.DrawFn) -> dict[str, Any]:
    group = draw(st.integers(1, 3))
    return {
        "n": draw(st.integers(1, 2)),
        "group": group,
        "cin_g": draw(st.integers(1, 2)),
        "cout": group * draw(st.integers(1, 2)),
        "hw": (draw(st.integers(1, 7)), draw(st.integers(1, 7))),
        "kernel": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        "strides": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        "pads": tuple(draw(st.integers(0, 2)) for _ in range(4)),
        "dilations": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
    }


@HYPOTHESIS
@given(conv_configs())
def test_convolution_output_dims_match_reference(cfg: dict[str, Any]) -> None:
    """For random strides/pads/dilations/groups/kernels, type dims == reference dims (or a clean refusal)."""
    spec = PRIMITIVES["Convolution"]
    xshape = (cfg["n"], cfg["group"] * cfg["cin_g"], *cfg["hw"])
    wshape = (cfg["cout"], cfg["cin_g"], *cfg["kernel"])
    attrs = {k: cfg[k] for k in ("strides", "pads", "dilations", "group")}
    pads, dil, kernel = cfg["pads"], cfg["dilations"], cfg["kernel"]
    fits = all(cfg["hw"][i] + pads[i] + pads[i + 2] >= dil[i] * (kernel[i] - 1) + 1 for i in range(2))
    if not fits:
        with pytest.raises(ShapeError, match="larger than padded input"):
            infer(spec, [Type(xshape), Type(wshape)], attrs)
        return
    t = infer(spec, [Type(xshape), Type(wshape)], attrs)
    rng = np.random.default_rng(seed_of(repr(cfg)))
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    out = evaluate(spec, [x, w], attrs)
    assert out.shape == t.shape
    assert relative_error(out, naive_conv(x, w, cfg["strides"], pads, dil, cfg["group"])) < 1e-12


@HYPOTHESIS
@given(
    st.lists(st.integers(1, 4), min_size=0, max_size=4).flatmap(
        lambda shape: st.tuples(st.just(tuple(shape)), st.permutations(range(len(shape))))
    )
)
def test_transpose_random_permutations(case: tuple) -> None:
    """Transpose's type is np.transpose's shape for every permutation, and the data agrees."""
    shape, perm = case
    perm = tuple(perm)
    spec = PRIMITIVES["Transpose"]
    t = infer(spec, [Type(shape)], {"shuffle": perm})
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    out = evaluate(spec, [x], {"shuffle": perm})
    assert t.shape == out.shape == np.transpose(x, perm).shape
    for index in itertools.product(*map(range, out.shape)):
        src = [0] * len(shape)
        for i, p in enumerate(perm):
            src[p] = index[i]
        assert out[index] == x[tuple(src)]


@HYPOTHESIS
@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple), st.lists(st.integers(-1, 4), max_size=4)
)
def test_transpose_refuses_non_permutations(shape: tuple, shuffle: list[int]) -> None:
    """A shuffle that is not a permutation of range(rank) is a ShapeError."""
    if sorted(shuffle) == list(range(len(shape))):
        return
    with pytest.raises(ShapeError, match="bad shuffle"):
        infer(PRIMITIVES["Transpose"], [Type(shape)], {"shuffle": tuple(shuffle)})


@st.composite
def concat_cases(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], int]:
    rank = draw(st.integers(1, 4))
    base = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    shapes = []
    for _ in range(draw(st.integers(1, 4))):
        s = list(base)
        s[axis] = draw(st.integers(0, 3))
        shapes.append(tuple(s))
    return shapes, axis


@HYPOTHESIS
@given(concat_cases())
def test_concat_random_axes(case: tuple) -> None:
    """Concat's type equals np.concatenate's shape along random (also negative) axes."""
    shapes, axis = case
    spec = PRIMITIVES["Concat"]
    t = infer(spec, [Type(s) for s in shapes], {"axis": axis})
    arrays = [np.full(s, i, np.float32) for i, s in enumerate(shapes)]
    out = evaluate(spec, arrays, {"axis": axis})
    assert t.shape == out.shape == np.concatenate(arrays, axis=axis).shape


@HYPOTHESIS
@given(concat_cases(), st.integers(0, 3))
def test_concat_refuses_disagreeing_dims(case: tuple, extra: int) -> None:
    """An input differing outside the axis is a ShapeError naming the types."""
    shapes, axis = case
    rank = len(shapes[0])
    if rank < 2:
        return
    other = (axis % rank + 1) % rank
    bad = list(shapes[0])
    bad[other] += 1 + extra
    types = [Type(s) for s in shapes] + [Type(tuple(bad))]
    with pytest.raises(ShapeError, match="disagree outside axis") as err:
        infer(PRIMITIVES["Concat"], types, {"axis": axis})
    assert str(Type(tuple(bad))) in str(err.value)


def test_concat_refuses_axis_out_of_range() -> None:
    """An axis outside [-rank, rank) is a ShapeError."""
    with pytest.raises(ShapeError, match="out of range"):
        infer(PRIMITIVES["Concat"], [Type((2, 3)), Type((2, 3))], {"axis": 2})


def test_concat_of_scalars_is_a_shape_error() -> None:
    """Rank-0 tensors have no axis to join along: a ShapeError, like every type-rule refusal."""
    with pytest.raises(ShapeError):
        infer(PRIMITIVES["Concat"], [Type(()), Type(())], {"axis": 0})


@HYPOTHESIS
@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple),
    st.lists(st.integers(0, 6), min_size=0, max_size=4).map(tuple),
)
def test_reshape_accepts_exactly_same_size(xshape: tuple, shape: tuple) -> None:
    """Reshape accepts a target shape iff it has as many elements."""
    spec = PRIMITIVES["Reshape"]
    if math.prod(xshape) != math.prod(shape):
        with pytest.raises(ShapeError, match="cannot reshape"):
            infer(spec, [Type(xshape)], {"shape": shape})
        return
    t = infer(spec, [Type(xshape)], {"shape": shape})
    assert t == Type(shape)
    x = np.arange(math.prod(xshape), dtype=np.float32).reshape(xshape)
    np.testing.assert_array_equal(evaluate(spec, [x], {"shape": shape}), x.reshape(shape))


def test_reshape_negative_dims_are_a_shape_error() -> None:
    """shape=(-2, -2) for 4 elements must be refused with a ShapeError (a GlowError), not a ValueError."""
    with pytest.raises(ShapeError):
        infer(PRIMITIVES["Reshape"], [Type((4,))], {"shape": (-2, -2)})
