"""Slice, Gather, Pad and Broadcast references against explicit index maps written here."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from primitive_cases import HYPOTHESIS, evaluate, infer, seed_of

from glow_core.errors import ShapeError
from glow_core.spec import PRIMITIVES
from glow_core.types import Type

# ---- Slice, Gather, Pad, Broadcast against explicit index maps -------------------------


def slice_oracle(x: np.ndarray, starts: tuple, ends: tuple, steps: tuple) -> np.ndarray:
    """Index lists per axis: range(start, end, step) (end -1 with a negative step reaches 0)."""
    out = x
    for axis, (s, e, step) in enumerate(zip(starts, ends, steps, strict=True)):
        out = np.take(out, list(range(s, e, step)), axis=axis)
    return out


SLICE_CASES = [
    pytest.param((10,), (9,), (-1,), (-1,), id="reverse-all"),
    pytest.param((10,), (9,), (0,), (-2,), id="step-2-stop-before-0"),
    pytest.param((10,), (8,), (-1,), (-3,), id="step-3-to-start"),
    pytest.param((6, 7), (5, 1), (0, 7), (-2, 3), id="mixed"),
    pytest.param((4, 5, 6), (3, 0, 5), (-1, 5, 1), (-1, 2, -2), id="rank3"),
    pytest.param((5,), (2,), (2,), (-1,), id="empty"),
    pytest.param((6, 7), (1, 2), (5, 7), (1, 1), id="positive"),
]


@pytest.mark.parametrize(("shape", "starts", "ends", "steps"), SLICE_CASES)
def test_slice_negative_steps(
    shape: tuple, starts: tuple, ends: tuple, steps: tuple, request: pytest.FixtureRequest
) -> None:
    """Slice (incl. negative steps) equals taking range(start, end, step) along each axis."""
    x = np.random.default_rng(seed_of(request.node.name)).standard_normal(shape).astype(np.float32)
    attrs = {"starts": starts, "ends": ends, "steps": steps}
    out = evaluate(PRIMITIVES["Slice"], [x], attrs)
    expected = slice_oracle(x, starts, ends, steps)
    assert out.shape == expected.shape == infer(PRIMITIVES["Slice"], [Type.of(x)], attrs).shape
    np.testing.assert_array_equal(out, expected)


@st.composite
def clamped_slices(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple, tuple, tuple]:
    """A shape and per-dim (start, end, step) already clamped as ONNX clamps them."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    starts, ends, steps = [], [], []
    for d in shape:
        step = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        if step > 0:
            starts.append(draw(st.integers(0, d)))
            ends.append(draw(st.integers(0, d)))
        else:
            starts.append(draw(st.integers(0, d - 1)))
            ends.append(draw(st.integers(-1, d - 1)))
        steps.append(step)
    return shape, tuple(starts), tuple(ends), tuple(steps)


@HYPOTHESIS
@given(clamped_slices())
def test_slice_property(case: tuple) -> None:
    """For clamped bounds, Slice's type and reference agree with the index-list oracle."""
    shape, starts, ends, steps = case
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    attrs = {"starts": starts, "ends": ends, "steps": steps}
    t = infer(PRIMITIVES["Slice"], [Type.of(x)], attrs)
    out = evaluate(PRIMITIVES["Slice"], [x], attrs)
    expected = slice_oracle(x, starts, ends, steps)
    assert t.shape == out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


def _slice_sweep(start_minus_one_negative_step: bool) -> list[tuple[int, int, int, int]]:
    """Every (size, start, end, step) with small sizes and bounds from -3 to size + 2."""
    cases = []
    for d in range(4):
        for step in (-2, -1, 1, 2):
            for s, e in itertools.product(range(-3, d + 3), repeat=2):
                if (s == -1 and step < 0) == start_minus_one_negative_step:
                    cases.append((d, s, e, step))
    return cases


def _check_slice_acceptance(cases: list[tuple[int, int, int, int]]) -> int:
    """Where the type rule accepts, type, reference and the index-list oracle agree; returns #accepted."""
    accepted = 0
    spec = PRIMITIVES["Slice"]
    for d, s, e, step in cases:
        x = np.arange(d, dtype=np.float32) + 1
        attrs = {"starts": (s,), "ends": (e,), "steps": (step,)}
        try:
            t = infer(spec, [Type.of(x)], attrs)
        except ShapeError:
            continue
        accepted += 1
        out = evaluate(spec, [x], attrs)
        expected = slice_oracle(x, (s,), (e,), (step,))
        assert out.shape == t.shape == expected.shape, (d, s, e, step)
        np.testing.assert_array_equal(out, expected, err_msg=str((d, s, e, step)))
    return accepted


def test_slice_type_rule_accepts_only_what_reference_agrees_with() -> None:
    """Over all small bounds, incl. out-of-range ones, whatever the type rule accepts the reference
    computes exactly (ends past the dim, or -1 with a positive step, must be refused)."""
    assert _check_slice_acceptance(_slice_sweep(start_minus_one_negative_step=False)) > 50
    for ends, steps in (((9,), (1,)), ((-1,), (1,))):
        with pytest.raises(ShapeError):
            infer(PRIMITIVES["Slice"], [Type((4,))], {"starts": (0,), "ends": ends, "steps": steps})


def test_slice_start_minus_one_negative_step() -> None:
    """start=-1 with a negative step: the type rule must refuse it or agree with the reference."""
    _check_slice_acceptance(_slice_sweep(start_minus_one_negative_step=True))


def gather_oracle(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """out[pre, idx..., post] = data[pre, indices[idx] mod n, post], built by loops."""
    axis %= data.ndim
    n = data.shape[axis]
    pre, post = data.shape[:axis], data.shape[axis + 1 :]
    out = np.zeros(pre + indices.shape + post, data.dtype)
    for p in itertools.product(*map(range, pre)):
        for i in itertools.product(*map(range, indices.shape)):
            k = int(indices[i])
            k = k + n if k < 0 else k
            out[p + i] = data[(*p, k)]
    return out


@pytest.mark.parametrize(
    ("dshape", "indices", "axis"),
    [
        pytest.param((5, 4), [-1, 0, -5, 3], 0, id="axis0"),
        pytest.param((3, 6), [[-2, 1], [5, -6]], 1, id="axis1-2d-indices"),
        pytest.param((2, 3, 4), [-1, -4, 2], -1, id="negative-axis"),
        pytest.param((4, 3), -2, 0, id="scalar-index"),
    ],
)
@pytest.mark.parametrize("index_kind", [np.int32, np.int64])
def test_gather_negative_indices(
    dshape: tuple, indices: Any, axis: int, index_kind: type, request: pytest.FixtureRequest
) -> None:
    """Gather counts negative indices from the end, like the loop oracle."""
    data = np.random.default_rng(seed_of(request.node.name)).standard_normal(dshape).astype(np.float32)
    idx = np.asarray(indices, dtype=index_kind)
    out = evaluate(PRIMITIVES["Gather"], [data, idx], {"axis": axis})
    expected = gather_oracle(data, idx, axis)
    assert out.shape == infer(PRIMITIVES["Gather"], [Type.of(data), Type.of(idx)], {"axis": axis}).shape
    np.testing.assert_array_equal(out, expected)


def test_gather_refuses_float_indices() -> None:
    """Indices must be int32 or int64."""
    with pytest.raises(ShapeError, match="indices"):
        infer(PRIMITIVES["Gather"], [Type((4, 3)), Type((2,))], {})


def pad_oracle(x: np.ndarray, pads: tuple, value: float) -> np.ndarray:
    """A filled tensor with the input copied at offset pads[:rank]."""
    r = x.ndim
    out = np.full(tuple(d + pads[i] + pads[i + r] for i, d in enumerate(x.shape)), value, dtype=np.float64)
    out[tuple(slice(pads[i], pads[i] + d) for i, d in enumerate(x.shape))] = x
    return out


@pytest.mark.parametrize(
    ("shape", "pads", "value"),
    [
        pytest.param((2, 3), (1, 0, 2, 3), 0.0, id="2d"),
        pytest.param((1, 2, 4, 4), (0, 0, 1, 1, 0, 0, 1, 1), -1.0, id="nchw"),
        pytest.param((3,), (0, 0), 5.0, id="nothing"),
        pytest.param((2, 1, 2), (3, 0, 1, 0, 2, 2), 2.5, id="rank3"),
    ],
)
def test_pad(shape: tuple, pads: tuple, value: float, request: pytest.FixtureRequest) -> None:
    """Pad puts the input at the begin offsets and fills the rest with ``value``."""
    x = np.random.default_rng(seed_of(request.node.name)).standard_normal(shape).astype(np.float32)
    attrs = {"pads": pads, "value": value}
    out = evaluate(PRIMITIVES["Pad"], [x], attrs)
    assert out.shape == infer(PRIMITIVES["Pad"], [Type.of(x)], attrs).shape
    np.testing.assert_array_equal(out, pad_oracle(x, pads, value))


def test_pad_refuses_negative_and_wrong_length() -> None:
    """Negative pads (a Slice) and a pads list of the wrong length are ShapeErrors."""
    with pytest.raises(ShapeError, match="negative"):
        infer(PRIMITIVES["Pad"], [Type((2, 3))], {"pads": (0, -1, 0, 0)})
    with pytest.raises(ShapeError, match="two entries per dim"):
        infer(PRIMITIVES["Pad"], [Type((2, 3))], {"pads": (1, 1)})


def broadcast_oracle(x: np.ndarray, shape: tuple) -> np.ndarray:
    """out[i] = x[i aligned to the right, size-1 dims pinned to 0], by loops."""
    out = np.zeros(shape, x.dtype)
    lead = len(shape) - x.ndim
    for index in itertools.product(*map(range, shape)):
        src = tuple(0 if d == 1 else i for i, d in zip(index[lead:], x.shape, strict=True))
        out[index] = x[src]
    return out


@pytest.mark.parametrize(
    ("xshape", "shape"),
    [
        ((1, 5), (4, 5)),
        ((3, 1, 1), (2, 3, 4, 6)),
        ((), (7,)),
        ((2, 1), (2, 3)),
        ((4,), (3, 4)),
        ((2, 3), (2, 3)),
    ],
)
def test_broadcast(xshape: tuple, shape: tuple, request: pytest.FixtureRequest) -> None:
    """Broadcast repeats size-1 and missing leading dimensions, like the loop oracle."""
    x = np.asarray(np.random.default_rng(seed_of(request.node.name)).standard_normal(xshape), np.float32)
    out = evaluate(PRIMITIVES["Broadcast"], [x], {"shape": shape})
    assert out.shape == infer(PRIMITIVES["Broadcast"], [Type.of(x)], {"shape": shape}).shape
    np.testing.assert_array_equal(out, broadcast_oracle(x, shape))
