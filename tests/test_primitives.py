"""The primitive contract: type rules agree with the numpy references, and the references
agree with independent float64 oracles written here (naive loops, explicit index maps)."""

from __future__ import annotations

import itertools
import math
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glow_core.accuracy import relative_error
from glow_core.errors import GlowError, ShapeError
from glow_core.spec import PRIMITIVES, Example, OpSpec
from glow_core.types import ElemKind, Type

HYPOTHESIS = settings(max_examples=50, deadline=None)


def _seed(test_id: str) -> int:
    """A stable seed per test id, so every test sees different data."""
    return zlib.crc32(test_id.encode())


def _inputs(
    spec: OpSpec, types: list[Type], attrs: dict[str, Any], rng: np.random.Generator
) -> list[np.ndarray]:
    """The spec's own ``sample`` when it has one (positive Log inputs, valid Gather indices)."""
    return spec.sample_inputs(rng, types, attrs)


def _example_label(example: Example) -> str:
    """``f32-4x3_3x5`` for (f32[4,3], f32[3,5]); the kind is repeated only when it changes."""
    if not example.operands:
        return "_".join(f"{k}={v}" for k, v in example.attrs.items()).replace(" ", "")
    parts = []
    kind = None
    for t in example.types():
        dims = "x".join(map(str, t.shape)) or "s"
        parts.append(dims if t.elem.value == kind else f"{t.elem.value}-{dims}")
        kind = t.elem.value
    return "_".join(parts)


def _cases() -> list[Any]:
    cases = []
    for name in sorted(PRIMITIVES):
        labels: set[str] = set()
        for index, example in enumerate(PRIMITIVES[name].examples):
            label = _example_label(example)
            if label in labels:
                label = f"{label}-{index}"
            labels.add(label)
            cases.append(pytest.param(name, example, id=f"{name}[{label}]"))
    return cases


CASES = _cases()


def _type(spec: OpSpec, types: list[Type], attrs: dict[str, Any]) -> Type:
    return spec.infer_type(types, spec.complete_attrs(attrs))


def _run(spec: OpSpec, arrays: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.asarray(spec.evaluate(arrays, spec.complete_attrs(attrs)))


# ---- every primitive, every example ---------------------------------------------------


def test_case_ids_are_unique_and_cover_every_primitive() -> None:
    """Each (primitive, example) pair has its own id, and no primitive is left out."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert "MatMul[f32-4x3_3x5]" in ids
    assert {c.values[0] for c in CASES} == set(PRIMITIVES)


@pytest.mark.parametrize(("name", "example"), CASES)
def test_type_rule_matches_reference(name: str, example: Example, request: pytest.FixtureRequest) -> None:
    """The type rule's result shape is the shape the reference computes on random inputs."""
    spec = PRIMITIVES[name]
    rng = np.random.default_rng(_seed(request.node.callspec.id))
    types = example.types()
    attrs = spec.complete_attrs(example.attrs)
    result_type = spec.infer_type(types, attrs)
    arrays = _inputs(spec, types, attrs, rng)
    assert [Type.of(a) for a in arrays] == types, "sample must produce the declared operand types"
    copies = [a.copy() for a in arrays]
    out = np.asarray(spec.evaluate(arrays, attrs))
    assert out.shape == result_type.shape
    if result_type.elem.is_float:
        assert out.dtype.kind == "f"
        assert np.all(np.isfinite(out))
    else:
        assert out.dtype == result_type.dtype
    for before, after in zip(copies, arrays, strict=True):
        np.testing.assert_array_equal(before, after, err_msg="the reference modified an operand")


@pytest.mark.parametrize(("name", "example"), CASES)
def test_examples_use_declared_kinds(name: str, example: Example) -> None:
    """Float operands of an example are of a kind the primitive declares support for."""
    spec = PRIMITIVES[name]
    for t in example.types():
        if t.elem.is_float:
            assert t.elem in spec.kinds


# ---- Convolution against a naive loop -------------------------------------------------


def naive_conv(
    x: np.ndarray, w: np.ndarray, strides: tuple, pads: tuple, dilations: tuple, group: int
) -> np.ndarray:
    """Direct float64 convolution by loops; pads are (top, left, bottom, right)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, _, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    cout_g = cout // group
    out = np.zeros((n, cout, oh, ow))
    for b, o, i, j in itertools.product(range(n), range(cout), range(oh), range(ow)):
        g = o // cout_g
        acc = 0.0
        for ci, p, q in itertools.product(range(cin_g), range(kh), range(kw)):
            y = i * strides[0] - pads[0] + p * dilations[0]
            z = j * strides[1] - pads[1] + q * dilations[1]
            if 0 <= y < h and 0 <= z < wd:
                acc += x[b, g * cin_g + ci, y, z] * w[o, ci, p, q]
        out[b, o, i, j] = acc
    return out


CONV_CASES = [
    pytest.param((1, 3, 6, 6), (4, 3, 3, 3), {}, id="plain"),
    pytest.param((1, 3, 8, 8), (4, 3, 3, 3), {"pads": (1, 1, 1, 1)}, id="same-pad"),
    pytest.param((2, 2, 7, 9), (3, 2, 3, 2), {"strides": (2, 3)}, id="strides"),
    pytest.param((1, 2, 6, 7), (2, 2, 2, 3), {"pads": (0, 2, 1, 0)}, id="asymmetric-pads"),
    pytest.param((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": (2, 3), "pads": (1, 0, 2, 1)}, id="dilation"),
    pytest.param((2, 4, 6, 5), (6, 2, 3, 2), {"strides": (2, 1), "group": 2}, id="groups"),
    pytest.param((1, 5, 6, 6), (5, 1, 3, 3), {"pads": (1, 1, 1, 1), "group": 5}, id="depthwise"),
    pytest.param((1, 3, 7, 7), (6, 1, 3, 3), {"group": 3, "strides": (2, 2)}, id="depthwise-multiplier"),
    pytest.param((1, 4, 5, 5), (2, 4, 1, 1), {}, id="pointwise"),
    pytest.param(
        (1, 4, 8, 8),
        (4, 2, 2, 3),
        {"group": 2, "strides": (3, 2), "pads": (2, 1, 0, 1), "dilations": (2, 1)},
        id="everything",
    ),
]


@pytest.mark.parametrize(("xshape", "wshape", "attrs"), CONV_CASES)
def test_convolution_matches_naive_loop(
    xshape: tuple, wshape: tuple, attrs: dict, request: pytest.FixtureRequest
) -> None:
    """Convolution's reference equals a direct loop, incl. stride, pads, dilation and groups."""
    rng = np.random.default_rng(_seed(request.node.name))
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    spec = PRIMITIVES["Convolution"]
    full = spec.complete_attrs(attrs)
    out = _run(spec, [x, w], attrs)
    expected = naive_conv(x, w, full["strides"], full["pads"], full["dilations"], full["group"])
    assert out.shape == _type(spec, [Type.of(x), Type.of(w)], attrs).shape
    assert relative_error(out, expected) < 1e-12


# ---- pooling against naive loops ------------------------------------------------------


def naive_pool(
    x: np.ndarray, kernel: tuple, strides: tuple, pads: tuple, mode: str, count_include_pad: bool = False
) -> np.ndarray:
    """Max or average over each window by loops; padded positions never count for max."""
    n, c, h, w = x.shape
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    out = np.zeros((n, c, oh, ow))
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        values = []
        for p, q in itertools.product(range(kernel[0]), range(kernel[1])):
            y = i * strides[0] - pads[0] + p
            z = j * strides[1] - pads[1] + q
            if 0 <= y < h and 0 <= z < w:
                values.append(float(x[b, ch, y, z]))
        if mode == "max":
            out[b, ch, i, j] = max(values)
        else:
            divisor = kernel[0] * kernel[1] if count_include_pad else len(values)
            out[b, ch, i, j] = sum(values) / divisor
    return out


POOL_CASES = [
    pytest.param((1, 2, 6, 6), (2, 2), (2, 2), (0, 0, 0, 0), id="k2s2"),
    pytest.param((2, 2, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), id="k3s2p1"),
    pytest.param((1, 3, 5, 5), (3, 3), (1, 1), (1, 1, 1, 1), id="k3s1p1"),
    pytest.param((1, 1, 6, 7), (2, 3), (1, 2), (0, 1, 1, 2), id="asymmetric"),
    pytest.param((1, 2, 4, 4), (4, 4), (1, 1), (0, 0, 0, 0), id="global"),
]


@pytest.mark.parametrize(("xshape", "kernel", "strides", "pads"), POOL_CASES)
def test_maxpool_matches_naive_loop(
    xshape: tuple, kernel: tuple, strides: tuple, pads: tuple, request: pytest.FixtureRequest
) -> None:
    """MaxPool's reference equals a loop over in-bounds window elements."""
    rng = np.random.default_rng(_seed(request.node.name))
    x = rng.standard_normal(xshape).astype(np.float32)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads}
    out = _run(PRIMITIVES["MaxPool"], [x], attrs)
    assert out.shape == _type(PRIMITIVES["MaxPool"], [Type.of(x)], attrs).shape
    assert relative_error(out, naive_pool(x, kernel, strides, pads, "max")) == 0.0


@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude-pad", "include-pad"])
@pytest.mark.parametrize(("xshape", "kernel", "strides", "pads"), POOL_CASES)
def test_avgpool_matches_naive_loop(
    xshape: tuple,
    kernel: tuple,
    strides: tuple,
    pads: tuple,
    count_include_pad: bool,
    request: pytest.FixtureRequest,
) -> None:
    """AvgPool's reference equals a loop, with pads counted in the divisor or not."""
    rng = np.random.default_rng(_seed(request.node.name))
    x = rng.standard_normal(xshape).astype(np.float32)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "count_include_pad": count_include_pad}
    out = _run(PRIMITIVES["AvgPool"], [x], attrs)
    assert out.shape == _type(PRIMITIVES["AvgPool"], [Type.of(x)], attrs).shape
    expected = naive_pool(x, kernel, strides, pads, "avg", count_include_pad)
    assert relative_error(out, expected) < 1e-12


def test_avgpool_pad_counting_differs() -> None:
    """With padding the two divisor conventions really give different border values."""
    rng = np.random.default_rng(_seed("avgpool-differs"))
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    attrs = {"kernel": (3, 3), "pads": (1, 1, 1, 1)}
    a = _run(PRIMITIVES["AvgPool"], [x], {**attrs, "count_include_pad": True})
    b = _run(PRIMITIVES["AvgPool"], [x], {**attrs, "count_include_pad": False})
    np.testing.assert_allclose(a[0, 0, 0, 0] * 9 / 4, b[0, 0, 0, 0], rtol=1e-12)
    np.testing.assert_allclose(a[0, 0, 1:3, 1:3], b[0, 0, 1:3, 1:3], rtol=1e-12)


@pytest.mark.parametrize("kind", ["AvgPool", "MaxPool"])
def test_pool_window_entirely_in_padding_is_refused(kind: str) -> None:
    """A window that covers no input element has no defined value, so the type rule must refuse it."""
    spec = PRIMITIVES[kind]
    attrs = {"kernel": (1, 1), "pads": (1, 1, 1, 1)}
    with pytest.raises(ShapeError):
        _type(spec, [Type((1, 1, 2, 2))], attrs)


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
    x = np.random.default_rng(_seed(request.node.name)).standard_normal(shape).astype(np.float32)
    attrs = {"starts": starts, "ends": ends, "steps": steps}
    out = _run(PRIMITIVES["Slice"], [x], attrs)
    expected = slice_oracle(x, starts, ends, steps)
    assert out.shape == expected.shape == _type(PRIMITIVES["Slice"], [Type.of(x)], attrs).shape
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
    t = _type(PRIMITIVES["Slice"], [Type.of(x)], attrs)
    out = _run(PRIMITIVES["Slice"], [x], attrs)
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
            t = _type(spec, [Type.of(x)], attrs)
        except ShapeError:
            continue
        accepted += 1
        out = _run(spec, [x], attrs)
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
            _type(PRIMITIVES["Slice"], [Type((4,))], {"starts": (0,), "ends": ends, "steps": steps})


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
    data = np.random.default_rng(_seed(request.node.name)).standard_normal(dshape).astype(np.float32)
    idx = np.asarray(indices, dtype=index_kind)
    out = _run(PRIMITIVES["Gather"], [data, idx], {"axis": axis})
    expected = gather_oracle(data, idx, axis)
    assert out.shape == _type(PRIMITIVES["Gather"], [Type.of(data), Type.of(idx)], {"axis": axis}).shape
    np.testing.assert_array_equal(out, expected)


def test_gather_refuses_float_indices() -> None:
    """Indices must be int32 or int64."""
    with pytest.raises(ShapeError, match="indices"):
        _type(PRIMITIVES["Gather"], [Type((4, 3)), Type((2,))], {})


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
    x = np.random.default_rng(_seed(request.node.name)).standard_normal(shape).astype(np.float32)
    attrs = {"pads": pads, "value": value}
    out = _run(PRIMITIVES["Pad"], [x], attrs)
    assert out.shape == _type(PRIMITIVES["Pad"], [Type.of(x)], attrs).shape
    np.testing.assert_array_equal(out, pad_oracle(x, pads, value))


def test_pad_refuses_negative_and_wrong_length() -> None:
    """Negative pads (a Slice) and a pads list of the wrong length are ShapeErrors."""
    with pytest.raises(ShapeError, match="negative"):
        _type(PRIMITIVES["Pad"], [Type((2, 3))], {"pads": (0, -1, 0, 0)})
    with pytest.raises(ShapeError, match="two entries per dim"):
        _type(PRIMITIVES["Pad"], [Type((2, 3))], {"pads": (1, 1)})


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
    x = np.asarray(np.random.default_rng(_seed(request.node.name)).standard_normal(xshape), np.float32)
    out = _run(PRIMITIVES["Broadcast"], [x], {"shape": shape})
    assert out.shape == _type(PRIMITIVES["Broadcast"], [Type.of(x)], {"shape": shape}).shape
    np.testing.assert_array_equal(out, broadcast_oracle(x, shape))


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
            _type(spec, [Type(xshape)], {"shape": shape})
        return
    t = _type(spec, [Type(xshape)], {"shape": shape})
    assert t == Type(shape)
    x = np.ones(xshape, np.float32)
    assert _run(spec, [x], {"shape": shape}).shape == shape


matmul_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


@HYPOTHESIS
@given(matmul_shapes, matmul_shapes)
def test_matmul_type_rule_accepts_exactly_compatible(a: tuple, b: tuple) -> None:
    """MatMul accepts [m,k] x [k,n] and nothing else."""
    spec = PRIMITIVES["MatMul"]
    ok = len(a) == len(b) == 2 and a[1] == b[0]
    if not ok:
        with pytest.raises(ShapeError):
            _type(spec, [Type(a), Type(b)], {})
        return
    t = _type(spec, [Type(a), Type(b)], {})
    assert t.shape == (a[0], b[1]) == np.matmul(np.ones(a), np.ones(b)).shape


@HYPOTHESIS
@given(matmul_shapes, matmul_shapes)
def test_batch_matmul_type_rule_accepts_exactly_compatible(a: tuple, b: tuple) -> None:
    """BatchMatMul accepts [b,m,k] x [b,k,n] (equal batch) and nothing else."""
    spec = PRIMITIVES["BatchMatMul"]
    ok = len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1]
    if not ok:
        with pytest.raises(ShapeError):
            _type(spec, [Type(a), Type(b)], {})
        return
    t = _type(spec, [Type(a), Type(b)], {})
    assert t.shape == (a[0], a[1], b[2])
    assert _run(spec, [np.ones(a, np.float32), np.ones(b, np.float32)], {}).shape == t.shape


@pytest.mark.parametrize("kind", ["MatMul", "BatchMatMul"])
def test_matmul_refuses_mixed_element_kinds(kind: str) -> None:
    """Operands of different element kinds are refused."""
    shape = (2, 3, 3) if kind == "BatchMatMul" else (3, 3)
    with pytest.raises(ShapeError, match="element kinds differ"):
        _type(PRIMITIVES[kind], [Type(shape), Type(shape, ElemKind.float16)], {})


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
            _type(spec, [Type(xshape), Type(wshape)], attrs)
        return
    t = _type(spec, [Type(xshape), Type(wshape)], attrs)
    rng = np.random.default_rng(_seed(repr(cfg)))
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    out = _run(spec, [x, w], attrs)
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
    t = _type(spec, [Type(shape)], {"shuffle": perm})
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    out = _run(spec, [x], {"shuffle": perm})
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
        _type(PRIMITIVES["Transpose"], [Type(shape)], {"shuffle": tuple(shuffle)})


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
    t = _type(spec, [Type(s) for s in shapes], {"axis": axis})
    arrays = [np.full(s, i, np.float32) for i, s in enumerate(shapes)]
    out = _run(spec, arrays, {"axis": axis})
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
        _type(PRIMITIVES["Concat"], types, {"axis": axis})
    assert str(Type(tuple(bad))) in str(err.value)


def test_concat_refuses_axis_out_of_range() -> None:
    """An axis outside [-rank, rank) is a ShapeError."""
    with pytest.raises(ShapeError, match="out of range"):
        _type(PRIMITIVES["Concat"], [Type((2, 3)), Type((2, 3))], {"axis": 2})


def test_concat_of_scalars_is_a_shape_error() -> None:
    """Rank-0 tensors have no axis to join along: a ShapeError, like every type-rule refusal."""
    with pytest.raises(ShapeError):
        _type(PRIMITIVES["Concat"], [Type(()), Type(())], {"axis": 0})


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
            _type(spec, [Type(xshape)], {"shape": shape})
        return
    t = _type(spec, [Type(xshape)], {"shape": shape})
    assert t == Type(shape)
    x = np.arange(math.prod(xshape), dtype=np.float32).reshape(xshape)
    np.testing.assert_array_equal(_run(spec, [x], {"shape": shape}), x.reshape(shape))


def test_reshape_negative_dims_are_a_shape_error() -> None:
    """shape=(-2, -2) for 4 elements must be refused with a ShapeError (a GlowError), not a ValueError."""
    with pytest.raises(ShapeError):
        _type(PRIMITIVES["Reshape"], [Type((4,))], {"shape": (-2, -2)})


# ---- type-rule errors name the types ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "types", "attrs", "message"),
    [
        ("MatMul", ["f32[4,3]", "f32[5,2]"], {}, "inner dimensions differ"),
        ("BatchMatMul", ["f32[2,3,4]", "f32[3,4,5]"], {}, "batch dimensions differ"),
        ("Add", ["f32[4,5]", "f32[5,4]"], {}, "same type"),
        ("Mul", ["f32[4]", "i32[4]"], {}, "same type"),
        ("Convolution", ["f32[1,3,8,8]", "f32[4,2,3,3]"], {}, "channels differ"),
        ("Concat", ["f32[2,3]", "f32[3,4]"], {"axis": 1}, "disagree outside axis"),
    ],
)
def test_type_errors_are_shape_errors_naming_both_types(
    kind: str, types: list[str], attrs: dict, message: str
) -> None:
    """A refusal is a ShapeError (a GlowError) whose message names every offending type."""
    parsed = [Type.parse(t) for t in types]
    with pytest.raises(ShapeError) as err:
        _type(PRIMITIVES[kind], parsed, attrs)
    assert isinstance(err.value, GlowError)
    text = str(err.value)
    assert message in text
    for t in parsed:
        assert str(t) in text


def test_wrong_operand_count_is_a_shape_error() -> None:
    """Giving a binary primitive one operand is a ShapeError naming the operands."""
    with pytest.raises(ShapeError, match=r"expects 2 operands \(lhs, rhs\), got 1"):
        _type(PRIMITIVES["Add"], [Type((2,))], {})


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_reference_orders_large_integers_exactly(dtype, largest):
    """Values float64 would merge (2**64-4 and 2**64-1; int64 extremes) keep their order."""
    from glow_core.spec import spec_of

    info = np.iinfo(dtype)
    x = np.array([[info.max - 3, info.max, info.min, info.max - 3, info.min + 1]], dtype=dtype)
    got = spec_of("TopK").evaluate([x], {"k": 5, "axis": 1, "largest": largest})
    want = sorted(range(5), key=lambda i: (-int(x[0, i]) if largest else int(x[0, i]), i))
    assert got.tolist() == [want]
