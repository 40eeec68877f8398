"""The narrow element kinds (float8, float4, int4, int2): their facts, tables and conversions.

Conversions are exact, so results are compared for equality (NaN where the oracle has NaN,
the same sign on zeros) with independent oracles: ml_dtypes for the value tables, and
``onnx.reference`` (the code that generated ONNX's own expected outputs) for whole ONNX
Cast / QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear models compiled by glow on
the interpreter and, when installed, on the cpu backend. Inputs are seeded random values of
every magnitude plus the hard cases: exact ties between two codes, their float neighbours,
out-of-range values, infinities, NaN, -0 and float32 subnormals.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import onnx
import pytest
from installed_backends import install_backend
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import relative_error
from glow_core.errors import ShapeError
from glow_core.graph import Module
from glow_core.narrow import FORMATS, NarrowFloat, decode_table, finite_codes, rounding_thresholds
from glow_core.types import FLOAT_KINDS, INT_KINDS, NARROW_KINDS, ElemKind, Type

OPSET = 25
FLOAT8 = [
    ElemKind.float8_e4m3fn,
    ElemKind.float8_e4m3fnuz,
    ElemKind.float8_e5m2,
    ElemKind.float8_e5m2fnuz,
    ElemKind.float4_e2m1fn,
]
NARROW_INTS = [ElemKind.int4, ElemKind.uint4, ElemKind.int2, ElemKind.uint2]
ALL_NARROW = sorted(NARROW_KINDS, key=lambda k: k.name)


# ---- the facts and tables ---------------------------------------------------------------


def test_formats_cover_exactly_the_narrow_kinds() -> None:
    """One table entry per narrow kind; each is one byte of its ml_dtypes dtype and no compute kind."""
    assert set(FORMATS) == NARROW_KINDS
    for kind in NARROW_KINDS:
        assert kind.dtype == np.dtype(getattr(ml_dtypes, kind.name))
        assert kind.itemsize == 1 and kind.is_narrow
        assert kind not in FLOAT_KINDS | INT_KINDS and not kind.is_float
        assert ElemKind.from_dtype(kind.dtype) is kind
        assert Type.parse(f"{kind.value}[2,3]") == Type((2, 3), kind)


@pytest.mark.parametrize("kind", ALL_NARROW, ids=lambda k: k.name)
def test_decode_table_matches_ml_dtypes(kind: ElemKind) -> None:
    """The table derived from the layout facts gives ml_dtypes' value for every code."""
    codes = 1 << FORMATS[kind].bits
    ours = decode_table(kind)[:codes]
    theirs = np.arange(codes, dtype=np.uint8).view(kind.dtype).astype(np.float32)
    np.testing.assert_array_equal(ours, theirs)
    finite = np.isfinite(theirs)
    np.testing.assert_array_equal(np.signbit(ours[finite]), np.signbit(theirs[finite]))
    # Bits above the kind's width are ignored, so any byte decodes.
    np.testing.assert_array_equal(decode_table(kind)[codes : 2 * codes], ours) if codes < 256 else None
    assert np.isfinite(decode_table(kind)[finite_codes(kind)]).all()


def _ties_and_neighbours(kind: ElemKind, dtype: np.dtype) -> np.ndarray:
    """Midpoints between consecutive finite values of ``kind`` (exact in ``dtype``) and the
    floats just below and above each, with both signs."""
    values = np.unique(np.abs(decode_table(kind)[finite_codes(kind)].astype(np.float64)))
    mids = ((values[1:] + values[:-1]) / 2).astype(dtype)
    near = np.concatenate([mids, np.nextafter(mids, dtype.type(0)), np.nextafter(mids, dtype.type(np.inf))])
    return np.concatenate([near, -near])


def _float_samples(rng: np.random.Generator, kind: ElemKind, dtype: np.dtype) -> np.ndarray:
    """Random values of every magnitude around ``kind``'s range, plus every hard case."""
    dtype = np.dtype(dtype)
    spread = rng.standard_normal(400) * 10.0 ** rng.uniform(-9, 6, 400)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-40, -1e-40, 3e-45]
    top = float(np.abs(decode_table(kind)[finite_codes(kind)]).max())
    edge = [top, -top, top * 1.03, top * 1.07, top * 1.2, -top * 1.07, 65504.0]
    with np.errstate(over="ignore"):  # float16 samples: past 65504 is infinity, as intended
        out = np.concatenate([spread, special, edge]).astype(dtype)
    if dtype.itemsize >= 4:  # ties are exact only where the midpoints are representable
        out = np.concatenate([out, _ties_and_neighbours(kind, dtype)])
    return out


def _round_exactly(x: np.ndarray, kind: ElemKind, saturate: bool) -> np.ndarray:
    """float64 values of ``x`` (any float dtype) in ``kind``: the nearest value, ties to the
    even code, decided in exact rational arithmetic. An oracle for float64 sources, where
    ml_dtypes and onnx.reference round twice (through float32)."""
    fmt = FORMATS[kind]
    assert isinstance(fmt, NarrowFloat)
    top = fmt.max_code if saturate or fmt.overflow_code is None else fmt.max_code + 1
    values = np.array([fmt.magnitude(code) for code in range(top + 1)])  # increasing with the code
    overflow = float(decode_table(kind)[fmt.overflow_code]) if top > fmt.max_code else None
    out = []
    for value in x.astype(np.float64):
        if np.isnan(value):
            out.append(np.nan if fmt.nan != "none" else 0.0)
            continue
        magnitude = min(abs(value), values[-1])  # past the last value: the last value
        code = int(np.searchsorted(values, magnitude, side="right")) - 1
        if code < top:
            below = Fraction(magnitude) - Fraction(values[code])
            above = Fraction(values[code + 1]) - Fraction(magnitude)
            code += int(above < below or (above == below and code % 2 == 1))
        result = overflow if code > fmt.max_code else float(values[code])
        unsigned_zero = result == 0 and fmt.nan == "negative_zero"
        out.append(0.0 if unsigned_zero else np.copysign(result, value))
    return np.array(out)


def _search(thresholds: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``#{k : thresholds[k] < bits(|x|)}``, with numpy (the graph does it with Gathers)."""
    bits = np.abs(x).view(thresholds.dtype)
    return np.searchsorted(thresholds, bits, side="left")


@pytest.mark.parametrize("source", [np.float32, np.float64])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("kind", FLOAT8, ids=lambda k: k.name)
def test_rounding_thresholds_round_like_ml_dtypes(
    rng: np.random.Generator, kind: ElemKind, saturate: bool, source: type
) -> None:
    """Counting thresholds below |x| gives the positive code ml_dtypes rounds x to."""
    x = _float_samples(rng, kind, np.dtype(source))
    x = np.abs(x[~np.isnan(x)])
    codes = _search(rounding_thresholds(kind, saturate, np.dtype(source)), x)
    fmt = FORMATS[kind]
    assert isinstance(fmt, NarrowFloat)
    if source is np.float64:
        expected = _round_exactly(x, kind, saturate)
    elif saturate or fmt.saturates_always:
        top = float(decode_table(kind)[fmt.max_code])
        expected = np.clip(x, -top, top).astype(kind.dtype).astype(np.float64)
    else:
        expected = x.astype(kind.dtype).astype(np.float64)
    np.testing.assert_array_equal(decode_table(kind)[codes], expected)


# ---- whole ONNX models on glow's backends, against onnx.reference ------------------------


@pytest.fixture(params=["interpreter", "cpu"])
def backend(request: pytest.FixtureRequest, install_registry) -> str:
    """Each backend by name (skipped when its plugin or device is missing)."""
    return install_backend(install_registry, request.param)


def _tensor_type(dtype: np.dtype | type | ElemKind) -> int:
    return helper.np_dtype_to_tensor_dtype(dtype.dtype if isinstance(dtype, ElemKind) else np.dtype(dtype))


Spec = tuple[str, list[str], dict[str, int], dict]


def _graph(feeds: dict[str, np.ndarray], nodes: list[Spec]) -> onnx.ModelProto:
    """A model of ``nodes`` (op, inputs, {output: element type}, attributes) over ``feeds``;
    several nodes share one compilation, which keeps the backend matrix quick."""
    inputs = [helper.make_tensor_value_info(n, _tensor_type(a.dtype), a.shape) for n, a in feeds.items()]
    protos, outputs = [], []
    for i, (op, ins, outs, attrs) in enumerate(nodes):
        protos.append(helper.make_node(op, ins, list(outs), name=f"{op.lower()}_{i}", **attrs))
        outputs += [helper.make_tensor_value_info(n, t, None) for n, t in outs.items()]
    model = helper.make_model(
        helper.make_graph(protos, "narrow", inputs, outputs), opset_imports=[helper.make_opsetid("", OPSET)]
    )
    model.ir_version = 12
    return model


def _model(op: str, feeds: dict[str, np.ndarray], outputs: dict[str, int], **attrs) -> onnx.ModelProto:
    """A one-node model."""
    return _graph(feeds, [(op, list(feeds), outputs, attrs)])


def _casts(x: np.ndarray, targets: list[tuple[ElemKind | type, dict]]) -> onnx.ModelProto:
    """One Cast of ``x`` per (target, attributes), outputs ``y0``, ``y1``..."""
    nodes = []
    for i, (target, attrs) in enumerate(targets):
        to = _tensor_type(target)
        nodes.append(("Cast", ["x"], {f"y{i}": to}, {"to": to, **attrs}))
    return _graph({"x": x}, nodes)


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> tuple[list, list]:
    """glow's outputs on ``backend`` and onnx.reference's, in graph-output order."""
    names = [o.name for o in model.graph.output]
    expected = ReferenceEvaluator(model).run(names, feeds)
    got = glow_core.compile(model, backend=backend).run(feeds)
    return [got[n] for n in names], [np.asarray(e) for e in expected]


def _assert_same(got: np.ndarray, want: np.ndarray, source: np.ndarray | None = None) -> None:
    """Equal dtype and values, NaN where ``want`` has NaN, and the sign of every zero (except
    zeros made from a NaN input: float4 has no NaN, and ONNX leaves that case unspecified)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(wide_got, wide_want)
    signed = ~np.isnan(wide_want)
    if source is not None:
        signed &= ~np.isnan(source.astype(np.float64))
    np.testing.assert_array_equal(np.signbit(wide_got[signed]), np.signbit(wide_want[signed]))


@pytest.mark.parametrize("source", [np.float32, np.float16, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("kind", FLOAT8, ids=lambda k: k.name)
def test_cast_float_to_narrow_float(
    rng: np.random.Generator, backend: str, kind: ElemKind, source: type
) -> None:
    """Round to nearest even, ties to the even code; saturate or overflow to inf/NaN; -0; NaN."""
    x = _float_samples(rng, kind, np.dtype(source))
    model = _casts(x, [(kind, {"saturate": 1}), (kind, {"saturate": 0})])
    got, want = _run_both(model, {"x": x}, backend)
    for saturate, g, w in zip((True, False), got, want, strict=True):
        if source is np.float64:  # glow rounds once; onnx.reference goes through float32 first
            w = _round_exactly(x, kind, saturate).astype(kind.dtype)
        _assert_same(g, w, x)


@pytest.mark.parametrize("source", [np.float32, np.float16], ids=lambda t: np.dtype(t).name)
def test_cast_to_float8e8m0(rng: np.random.Generator, backend: str, source: type) -> None:
    """FLOAT8E8M0 keeps the exponent, rounded up, down or to nearest on the mantissa bits as
    ONNX's reference does, with and without saturation."""
    powers = 2.0 ** rng.integers(-140, 128, 200)
    x = np.concatenate(
        [
            rng.uniform(0.5, 2.0, 200) * powers,
            powers,
            [0.0, np.inf, np.nan, 3.0e38, 2.0**127 * 1.5, 2.0**127 * 1.25, 1e-40, 1.5, 1.25, 1.75],
        ]
    )
    with np.errstate(over="ignore"):
        x = x.astype(source)
    modes = [{"round_mode": m, "saturate": s} for m in ("up", "down", "nearest") for s in (1, 0)]
    model = _casts(x, [(ElemKind.float8_e8m0fnu, attrs) for attrs in modes])
    got, want = _run_both(model, {"x": x}, backend)
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)


@pytest.mark.parametrize("source", [np.float32, np.float16, np.int32, np.int64, np.uint8])
def test_cast_to_narrow_int_wraps(rng: np.random.Generator, backend: str, source: type) -> None:
    """Floats truncate toward zero; out-of-range values keep their low bits (two's complement)."""
    if np.dtype(source).kind == "f":
        x = rng.uniform(-40, 40, 300)
        x = np.concatenate([x, np.trunc(x), [-0.0, 0.5, -0.5, 7.999, -8.001]]).astype(source)
    else:
        low = 0 if np.dtype(source).kind == "u" else -300
        x = rng.integers(low, 300, 300).astype(source)
    got, want = _run_both(_casts(x, [(kind, {}) for kind in NARROW_INTS]), {"x": x}, backend)
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)


@pytest.mark.parametrize("kind", ALL_NARROW, ids=lambda k: k.name)
def test_cast_narrow_to_float(rng: np.random.Generator, backend: str, kind: ElemKind) -> None:
    """Every code of the kind (NaN codes included), in random order, decodes exactly."""
    codes = np.arange(1 << FORMATS[kind].bits, dtype=np.uint8)
    x = rng.permutation(np.concatenate([codes, codes])).view(kind.dtype)
    targets = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
    with np.errstate(over="ignore"):  # E8M0's largest values are past float16
        got, want = _run_both(_casts(x, [(t, {}) for t in targets]), {"x": x}, backend)
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)


def test_cast_between_narrow_ints_wraps(rng: np.random.Generator, backend: str) -> None:
    """int4 -> uint2 and uint4 -> int2 keep the low bits (ml_dtypes cannot cast these, so the
    oracle is the two's complement rule itself, in numpy int64)."""
    pairs = [
        (ElemKind.int4, ElemKind.uint2),
        (ElemKind.uint4, ElemKind.int2),
        (ElemKind.int2, ElemKind.uint4),
    ]
    for source, target in pairs:
        codes = np.arange(1 << FORMATS[source].bits, dtype=np.uint8)
        x = rng.permutation(np.concatenate([codes, codes])).view(source.dtype)
        got = glow_core.compile(_casts(x, [(target, {})]), backend=backend).run({"x": x})["y0"]
        low_bits = x.astype(np.int64) & ((1 << FORMATS[target].bits) - 1)
        _assert_same(got, low_bits.astype(np.uint8).view(target.dtype))


@pytest.mark.parametrize(
    ("kind", "targets"),
    [
        (ElemKind.int4, [np.int8, np.int32, ElemKind.float8_e4m3fnuz]),
        (ElemKind.uint4, [np.uint8, np.int64]),
        (ElemKind.int2, [np.int32, np.int8]),
        (ElemKind.uint2, [np.int64, ElemKind.float4_e2m1fn]),
        (ElemKind.float8_e4m3fn, [np.int32, ElemKind.float4_e2m1fn, ElemKind.float8_e5m2]),
        (ElemKind.float8_e5m2, [np.int64, ElemKind.float8_e4m3fn, ElemKind.float8_e4m3fnuz]),
        (ElemKind.float4_e2m1fn, [np.int8, ElemKind.float8_e4m3fn]),
    ],
    ids=lambda v: v.name if isinstance(v, ElemKind) else "",
)
def test_cast_narrow_to_integer_and_narrow(
    rng: np.random.Generator, backend: str, kind: ElemKind, targets: list
) -> None:
    """Narrow to wide integers (truncating) and to other narrow kinds (through one rounding)."""
    codes = finite_codes(kind)
    x = rng.permutation(np.concatenate([codes, codes])).view(kind.dtype)
    got, want = _run_both(_casts(x, [(t, {}) for t in targets]), {"x": x}, backend)
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)


@pytest.mark.parametrize("kind", [*NARROW_INTS, *FLOAT8], ids=lambda k: k.name)
def test_quantize_and_dequantize_per_axis(rng: np.random.Generator, backend: str, kind: ElemKind) -> None:
    """QuantizeLinear to a narrow kind (per-axis scale and zero point) and back."""
    x = (rng.standard_normal((3, 8)) * 6).astype(np.float32)
    scale = rng.uniform(0.3, 2.0, 3).astype(np.float32)
    fmt = FORMATS[kind]
    if isinstance(fmt, NarrowFloat):  # float8 zero points must be 0; float4 ones are added
        zero = np.zeros(3, np.float32) if fmt.kind is not ElemKind.float4_e2m1fn else np.float32([0.5, -1, 0])
    else:
        zero = rng.integers(fmt.low, fmt.high + 1, 3).astype(np.float32)
    zero = zero.astype(kind.dtype)
    to = helper.np_dtype_to_tensor_dtype(kind.dtype)
    feeds = {"x": x, "scale": scale, "zero": zero}
    model = _model("QuantizeLinear", feeds, {"q": to}, axis=0)
    (q,), (want,) = _run_both(model, feeds, backend)
    _assert_same(q, want)
    # The spec's (q - zero_point) * scale, in float64 (onnx.reference ignores float4 zero points).
    back = {"q": q, "scale": scale, "zero": zero}
    model = _model("DequantizeLinear", back, {"y": TensorProto.FLOAT}, axis=0)
    got = glow_core.compile(model, backend=backend).run(back)["y"]
    wide = (q.astype(np.float64) - zero.astype(np.float64)[:, None]) * scale.astype(np.float64)[:, None]
    _assert_same(got, wide.astype(np.float32))


def test_blocked_int4_weights_as_initializers(rng: np.random.Generator, backend: str) -> None:
    """Weight-only int4 quantization as exported models carry it: int4 initializers with
    per-block scales and zero points, dequantized into a MatMul (relative error vs onnx.reference)."""
    w = rng.integers(-8, 8, (8, 6)).astype(ml_dtypes.int4)
    scale = rng.uniform(0.1, 1.0, (2, 6)).astype(np.float32)
    zero = rng.integers(-2, 2, (2, 6)).astype(ml_dtypes.int4)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=0, block_size=4),
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "int4_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, n) for n, v in (("w", w), ("s", scale), ("z", zero))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    (got,), (want,) = _run_both(model, {"x": x}, backend)
    assert relative_error(got, want) < 1e-6


@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_to_float8_saturation(rng: np.random.Generator, backend: str, saturate: int) -> None:
    """QuantizeLinear's ``saturate``: past the largest float8 value, clamp or give NaN/inf."""
    x = np.concatenate([rng.standard_normal(40) * 300, [1e6, -1e6, np.inf]]).astype(np.float32)
    scale, zero = np.array(0.5, np.float32), np.zeros((), ml_dtypes.float8_e5m2)
    for kind in (ElemKind.float8_e4m3fn, ElemKind.float8_e5m2):
        feeds = {"x": x, "scale": scale, "zero": zero.astype(kind.dtype)}
        to = helper.np_dtype_to_tensor_dtype(kind.dtype)
        model = _model("QuantizeLinear", feeds, {"q": to}, saturate=saturate)
        (got,), (want,) = _run_both(model, feeds, backend)
        _assert_same(got, want)


@pytest.mark.parametrize("shift", [0.0, 5.0, -5.0])
def test_dynamic_quantize_linear(rng: np.random.Generator, backend: str, shift: float) -> None:
    """uint8 data, scale and zero point from x's own range (all positive, all negative, mixed)."""
    x = (rng.standard_normal((4, 9)) + shift).astype(np.float32)
    model = _model(
        "DynamicQuantizeLinear",
        {"x": x},
        {"y": TensorProto.UINT8, "scale": TensorProto.FLOAT, "zero": TensorProto.UINT8},
    )
    got, want = _run_both(model, {"x": x}, backend)
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)


# ---- the primitives' side -------------------------------------------------------------


def test_convert_refuses_narrow_kinds() -> None:
    """A Convert of a narrow kind is a type error saying to go through BitCast to uint8."""
    fn = Module().create_function()
    b = fn.builder()
    x = b.placeholder("x", (4,), ElemKind.float8_e4m3fn)
    with pytest.raises(ShapeError, match=r"float8_e4m3fn is a storage kind.*BitCast to uint8"):
        b.Convert(x, elem="float32")
    raw = b.BitCast(x, elem="uint8")
    assert raw.type == Type((4,), ElemKind.uint8)
    with pytest.raises(ShapeError, match="int4 is a storage kind"):
        b.Convert(raw, elem="int4")
