"""The kinds beyond float32 and signed integers: float64 computed in double, float16 and
bfloat16 linear algebra computed in float32, unsigned and integer orderings (MaxPool, TopK,
ArgMax, reductions) on values the declared samples do not reach (above the signed range).

Every case draws its own seeded inputs (the ``rng`` fixture is seeded from the test id),
never all zeros; the runtime poisons outputs before each run, so an element no kernel
wrote reads as NaN (floats) or all ones (integers), which no expected value here equals.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from cpu_cases import one_primitive_ir, run_case
from glow_cpu.backend import CpuBackend, CpuOptions
from glow_cpu.emit import EMIT, Emitter, Emitters

import glow_core
from glow_core.graph import Module
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type

HALF_KINDS = ["float16", "bfloat16"]
WIDE = ["float64", *HALF_KINDS]


def _run(
    kind: str, arrays: list[np.ndarray], attrs: dict[str, Any] | None = None, threads: int = 1, constant=()
) -> np.ndarray:
    """``kind(*arrays)`` compiled for cpu (operands in ``constant`` as weights)."""
    types = [Type(a.shape, ElemKind.from_dtype(a.dtype)) for a in arrays]
    ir = one_primitive_ir(kind, types, attrs or {}, {i: arrays[i] for i in constant})
    compiled = CpuBackend().compile(ir, CpuOptions(threads=threads, parallel_work=0))
    return compiled.run({f"in{i}": a for i, a in enumerate(arrays) if i not in constant})["out"]


def _reference(kind: str, arrays: list[np.ndarray], attrs: dict[str, Any] | None = None) -> np.ndarray:
    spec = PRIMITIVES[kind]
    return np.asarray(spec.evaluate(arrays, spec.complete_attrs(attrs or {})))


def _retype(shape: str, elem: str) -> Type:
    return Type.parse(f"{elem}{shape}")


# ---- the emitter table --------------------------------------------------------------


def test_a_primitive_has_one_emitter_per_kind_and_declares_their_union():
    matmul = EMIT["MatMul"]
    assert matmul.kinds >= {ElemKind.float32, ElemKind.float64, ElemKind.float16, ElemKind.bfloat16}
    assert matmul.for_kind(ElemKind.float32).fn is not matmul.for_kind(ElemKind.float64).fn
    assert CpuBackend().info().supports["MatMul"] == ["bfloat16", "float16", "float32", "float64"]
    table = Emitters("Thing")
    table.add(Emitter(lambda k: None, frozenset({ElemKind.float32})))
    with pytest.raises(TypeError, match=r"Thing\[float32\]"):
        table.add(Emitter(lambda k: None, frozenset({ElemKind.float32, ElemKind.float64})))
    with pytest.raises(KeyError, match=r"Thing\[int8\]"):
        table.for_kind(ElemKind.int8)


def test_support_follows_every_change_to_the_emitter_table(monkeypatch):
    """``info`` is cached per state of the table: withdrawing a kind, putting it back and
    adding a choice to a kind each show at the next call."""
    backend = CpuBackend()
    every_tanh = backend.info().supports["Tanh"]
    assert "float32" in backend.info().supports["MatMul"]
    with monkeypatch.context() as patch:
        patch.delitem(EMIT, "MatMul")
        assert "MatMul" not in backend.info().supports
    assert backend.info().supports["MatMul"] == ["bfloat16", "float16", "float32", "float64"]
    emit_tanh = EMIT["Tanh"].for_kind(ElemKind.float32).fn
    tanh = Emitters("Tanh")
    tanh.add(Emitter(emit_tanh, frozenset({ElemKind.float32})))
    with monkeypatch.context() as patch:
        patch.setitem(EMIT, "Tanh", tanh)
        assert backend.info().supports["Tanh"] == ["float32"]
        tanh.add(Emitter(emit_tanh, frozenset({ElemKind.float64})))
        assert backend.info().supports["Tanh"] == ["float32", "float64"]
    assert backend.info().supports["Tanh"] == every_tanh


# ---- linear algebra in float64 and the half kinds --------------------------------------

MATMULS = [("[1,70]", "[70,33]"), ("[17,5]", "[5,9]"), ("[40,100]", "[100,50]"), ("[3,1]", "[1,1]")]
CONVOLUTIONS = [
    ("[2,5,9,11]", "[7,5,3,3]", {"pads": (1, 1, 1, 1)}),
    ("[1,4,13,12]", "[6,2,3,2]", {"strides": (2, 3), "group": 2, "pads": (0, 1, 2, 0)}),
    ("[1,6,10,10]", "[6,1,3,3]", {"pads": (2, 2, 1, 1), "group": 6, "dilations": (2, 1)}),
    ("[1,3,15,15]", "[4,3,7,7]", {"pads": (3, 3, 3, 3), "strides": (2, 2)}),
    ("[2,8,6,6]", "[5,8,1,1]", {}),
    ("[1,2,1,20]", "[3,2,1,4]", {"pads": (0, 3, 0, 0)}),  # a causal 1-D convolution
]


@pytest.mark.parametrize("constant", [(), (1,)], ids=["runtime", "weight"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("elem", WIDE)
@pytest.mark.parametrize(("lhs", "rhs"), MATMULS)
def test_matmul(lhs, rhs, elem, threads, constant, rng):
    types = [_retype(lhs, elem), _retype(rhs, elem)]
    assert run_case("MatMul", types, {}, rng, threads, constant) <= _TOLERANCE[elem]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("elem", WIDE)
def test_batch_matmul(elem, threads, rng):
    types = [_retype("[3,17,40]", elem), _retype("[3,40,9]", elem)]
    assert run_case("BatchMatMul", types, {}, rng, threads) <= _TOLERANCE[elem]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("elem", WIDE)
@pytest.mark.parametrize(("x", "w", "attrs"), CONVOLUTIONS)
def test_convolution(x, w, attrs, elem, threads, rng):
    types = [_retype(x, elem), _retype(w, elem)]
    assert run_case("Convolution", types, attrs, rng, threads, (1,)) <= _TOLERANCE[elem]


_TOLERANCE = {"float64": 1e-13, "float16": 1e-3, "bfloat16": 8e-3}


def test_float64_products_are_computed_in_double(rng):
    """Terms that cancel to many digits: float32 anywhere in the sum would lose them."""
    a = rng.uniform(0.5, 1.5, (6, 300))
    b = rng.uniform(0.5, 1.5, (300, 7))
    a[:, 1::2] = -a[:, ::2] + rng.uniform(1e-9, 2e-9, (6, 150))  # pairs that nearly cancel
    got = _run("MatMul", [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["MatMul", "Convolution"])
def test_half_results_are_rounded_once(kind, rng):
    """A float16 result is the float32 sum rounded once: within half an ulp of float16 plus
    float32's summation error (rounding every partial sum to float16 would exceed it)."""
    if kind == "MatMul":
        arrays = [rng.uniform(-2, 2, (9, 200)), rng.uniform(-2, 2, (200, 11))]
        magnitude = np.abs(arrays[0]) @ np.abs(arrays[1])
    else:
        arrays = [rng.uniform(-2, 2, (1, 8, 7, 7)), rng.uniform(-2, 2, (5, 8, 3, 3))]
        attrs = {"pads": (1, 1, 1, 1)}
        magnitude = _reference(kind, [np.abs(a) for a in arrays], attrs)
    arrays = [a.astype(np.float16) for a in arrays]
    attrs = {} if kind == "MatMul" else {"pads": (1, 1, 1, 1)}
    exact = _reference(kind, arrays, attrs)
    got = _run(kind, arrays, attrs).astype(np.float64)
    bound = 0.5 * np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64) + 1e-6 * magnitude
    assert np.all(np.abs(got - exact) <= bound)


# ---- float64 element-wise math: libm's accuracy, not float32's ----------------------

# Inputs over each function's useful range, and the C library's double function as the
# reference (numpy's own vector forms may differ from it by an ulp or two).
MATH = {
    "Exp": (lambda r, n: r.uniform(-700, 700, n), math.exp),
    "Log": (lambda r, n: 10.0 ** r.uniform(-300, 300, n), math.log),
    "Tanh": (lambda r, n: r.uniform(-20, 20, n), math.tanh),
    "Erf": (lambda r, n: r.uniform(-6, 6, n), math.erf),
    "Sin": (lambda r, n: r.uniform(-100, 100, n), math.sin),
    "Cos": (lambda r, n: r.uniform(-100, 100, n), math.cos),
    "Atan": (lambda r, n: r.uniform(-1e3, 1e3, n), math.atan),
    "Sqrt": (lambda r, n: r.uniform(1e-3, 1e6, n), math.sqrt),
    "Floor": (lambda r, n: r.uniform(-1e6, 1e6, n), math.floor),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", sorted(MATH))
def test_float64_math_functions_are_accurate_to_a_few_ulps(kind, threads, rng):
    draw, reference = MATH[kind]
    x = draw(rng, 1037)
    x[0] = 1e-8 if kind != "Log" else x[0]  # near zero, where relative accuracy is hardest
    got = _run(kind, [x], threads=threads)
    expected = np.array([float(reference(v)) for v in x])
    np.testing.assert_array_max_ulp(got, expected, maxulp=2)


@pytest.mark.parametrize("kind", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
def test_float64_binary_operations(kind, rng):
    x = rng.uniform(0.5, 3.0, (5, 33))
    y = rng.uniform(0.5, 3.0, (5, 33))
    x[0, 0] = np.nan if kind in ("Max", "Min") else x[0, 0]  # NaN propagates, as in numpy
    got = _run(kind, [x, y])
    np.testing.assert_allclose(got, _reference(kind, [x, y]), rtol=1e-15, atol=0)


def test_a_float64_graph_with_broadcasts_matches_numpy(rng):
    """x @ w + bias, tanh, scaled, summed per row: float64 end to end (never fused into the
    float32 epilogues, never narrowed)."""
    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (6, 30), ElemKind.float64)
    w = rng.standard_normal((30, 11))
    bias = rng.standard_normal(11)
    y = b.Tanh(b.add(b.MatMul(x, m.create_constant("w", w)), m.create_constant("bias", bias)))
    b.save(b.ReduceSum(b.mul(y, b.splat(0.25, y)), axes=(1,)), "y")
    compiled = glow_core.compile(m, backend=CpuBackend(), options=CpuOptions(threads=2, parallel_work=0))
    value = rng.standard_normal((6, 30))
    got = compiled.run({"x": value})["y"]
    expected = np.sum(np.tanh(value @ w + bias) * 0.25, axis=1, keepdims=True)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-13, atol=1e-14)


# ---- float64 reductions, scans, pooling, selection -------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("kind", "shape", "attrs"),
    [
        ("ReduceSum", (3, 2001, 5), {"axes": (1,)}),
        ("ReduceMax", (4, 7, 9), {"axes": (0, 2)}),
        ("CumReduce", (5, 60), {"axis": 1, "op": "sum"}),
        ("CumReduce", (4, 30), {"axis": 1, "op": "prod", "exclusive": True, "reverse": True}),
        ("AvgPool", (2, 3, 9, 8), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        ("MaxPool", (2, 3, 9, 8), {"kernel": (3, 2), "pads": (1, 1, 1, 1)}),
    ],
)
def test_float64_reductions(kind, shape, attrs, threads, rng):
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    got = _run(kind, [x], attrs, threads)
    np.testing.assert_allclose(got, _reference(kind, [x], attrs), rtol=1e-13, atol=1e-11)


def test_float64_argmax_and_topk_order_nan_as_numpy(rng):
    x = rng.standard_normal((3, 40))
    x[1, 7] = np.nan
    assert np.array_equal(_run("ArgMax", [x], {"axis": 1}), _reference("ArgMax", [x], {"axis": 1}))
    x[2, 5] = x[2, 30] = x[2].max() + 1e-12  # a tie one float32 could not tell from the max
    for largest in (True, False):
        attrs = {"k": 6, "axis": 1, "largest": largest}
        assert np.array_equal(_run("TopK", [x], attrs), _reference("TopK", [x], attrs))


# ---- integer kinds above the signed range ---------------------------------------------

UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]


def _full_range(rng: np.random.Generator, elem: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values spread over the whole kind (half of them above the signed range for unsigned
    kinds), never 0 and never the all-ones poison pattern (-1, or the unsigned maximum)."""
    info = np.iinfo(np.dtype(elem))
    values = rng.integers(int(info.min), int(info.max), shape, dtype=np.dtype(elem), endpoint=False)
    values[(values == 0) | (values == np.array(-1).astype(elem))] = 2
    return values


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("elem", [*UNSIGNED, "int8", "int64"])
def test_integer_max_pool(elem, threads, rng):
    x = _full_range(rng, elem, (2, 3, 11, 10))
    attrs = {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}  # padding never wins
    assert np.array_equal(_run("MaxPool", [x], attrs, threads), _reference("MaxPool", [x], attrs))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("elem", ["uint64", "int64", "uint8", "uint32"])
def test_integer_topk_over_the_whole_range(elem, largest, rng):
    x = _full_range(rng, elem, (4, 37))
    x[0, 3] = x[0, 20] = x[0, 30]  # ties keep index order
    attrs = {"k": 9, "axis": 1, "largest": largest}
    assert np.array_equal(_run("TopK", [x], attrs, threads=2), _reference("TopK", [x], attrs))


@pytest.mark.parametrize("elem", UNSIGNED)
def test_unsigned_argmax_reduce_max_and_scans(elem, rng):
    x = _full_range(rng, elem, (6, 23))
    for last in (False, True):
        attrs = {"axis": 1, "select_last": last}
        assert np.array_equal(_run("ArgMax", [x], attrs), _reference("ArgMax", [x], attrs))
    assert np.array_equal(_run("ReduceMax", [x], {"axes": (1,)}), x.max(axis=1, keepdims=True))
    wrapped_sum = np.sum(x, axis=0, keepdims=True, dtype=x.dtype)  # integers wrap in their width
    assert np.array_equal(_run("ReduceSum", [x], {"axes": (0,)}), wrapped_sum)
    scan = _run("CumReduce", [x], {"axis": 1, "op": "prod"})
    assert np.array_equal(scan, np.cumprod(x, axis=1, dtype=x.dtype))


@pytest.mark.parametrize("reduction", ["max", "min", "add"])
@pytest.mark.parametrize("elem", ["uint32", "uint64", "float64"])
def test_scatter_elements_combines_in_the_kind(elem, reduction, rng):
    if elem == "float64":
        data, updates = rng.standard_normal((5, 6)), rng.standard_normal((3, 6))
    else:
        data, updates = _full_range(rng, elem, (5, 6)), _full_range(rng, elem, (3, 6))
    indices = rng.integers(-5, 5, (3, 6)).astype(np.int64)
    attrs = {"axis": 0, "reduction": reduction}
    got = _run("ScatterElements", [data, indices, updates], attrs)
    expected = _reference("ScatterElements", [data, indices, updates], attrs).astype(data.dtype)
    if elem == "float64":
        np.testing.assert_allclose(got, expected, rtol=1e-15)
    else:
        assert np.array_equal(got, expected)
