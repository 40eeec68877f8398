"""Every gradient rule against central finite differences in float64.

Each case builds ``loss = sum(op(weights) * R)`` over Constants (R random, so the incoming
gradient is not all ones), differentiates it with plain SGD at lr = 1 (the update then
subtracts exactly the gradient), and compares with (L(w + h) - L(w - h)) / 2h per element,
the loss evaluated with the primitives' float64 references.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glow_core import SGD, Module, differentiate
from glow_core.errors import DifferentiationError
from glow_core.lowering.evaluate import evaluate
from glow_core.training import mean_squared_error, softmax_cross_entropy
from glow_core.training.differentiate import updated_name

STEP = 1e-6
dims = st.integers(1, 4)


def _loss_module(
    build: Callable, weights: list[np.ndarray], rng: np.random.Generator
) -> tuple[Module, list[str]]:
    module = Module("grad")
    fn = module.create_function()
    b = fn.builder()
    consts = [b.constant(w, name=f"w{i}", dtype=np.float64) for i, w in enumerate(weights)]
    out = build(b, *consts)
    mix = b.constant(rng.standard_normal(out.type.shape), name="mix", dtype=np.float64)
    loss = (
        b.ReduceSum(b.Mul(out, mix), axes=tuple(range(out.type.rank))) if out.type.rank else b.Mul(out, mix)
    )
    b.save(loss, "objective")
    return module, [c.name for c in consts]


def _loss_value(module: Module, names: list[str], values: list[np.ndarray]) -> float:
    for name, value in zip(names, values, strict=True):
        module.constants[name].value = value
    return float(evaluate(module, {})["objective"].reshape(-1)[0])


def check_gradients(build: Callable, weights: list[np.ndarray], rng: np.random.Generator) -> None:
    module, names = _loss_module(build, weights, rng)
    training = differentiate(module.function, "objective", names, SGD(lr=1.0))
    outputs = evaluate(training.module, training.feeds({}))
    for i, (name, w) in enumerate(zip(names, weights, strict=True)):
        analytic = w - outputs[updated_name(name)]
        numeric = np.zeros_like(w)
        for index in np.ndindex(w.shape):
            values = [v.copy() for v in weights]
            values[i][index] += STEP
            up = _loss_value(module, names, values)
            values[i][index] -= 2 * STEP
            down = _loss_value(module, names, values)
            numeric[index] = (up - down) / (2 * STEP)
        scale = max(np.abs(numeric).max(), 1.0)
        assert np.abs(analytic - numeric).max() / scale < 1e-6, (name, analytic, numeric)


def _normal(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _positive(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 2.0, s) for s in shapes]


seeds = st.integers(0, 2**31)
settings_small = settings(max_examples=8, deadline=None)

BINARY = {
    "add": lambda b, x, y: b.add(x, y),
    "sub": lambda b, x, y: b.sub(x, y),
    "mul": lambda b, x, y: b.mul(x, y),
    "max": lambda b, x, y: b.max(x, y),
    "min": lambda b, x, y: b.min(x, y),
}


@pytest.mark.parametrize("op", sorted(BINARY))
@settings_small
@given(m=dims, n=dims, row=st.booleans(), seed=seeds)
def test_binary_with_broadcasting(op: str, m: int, n: int, row: bool, seed: int) -> None:
    """The rhs is broadcast ([n] along rows, or [m, 1] along columns): its gradient is the
    outer gradient summed over the repeated axes."""
    rhs_shape = (n,) if row else (m, 1)
    check_gradients(BINARY[op], _normal(seed, (m, n), rhs_shape), np.random.default_rng(seed))


@settings_small
@given(m=dims, n=dims, seed=seeds)
def test_div_and_pow(m: int, n: int, seed: int) -> None:
    x, y = _positive(seed, (m, n), (m, n))
    rng = np.random.default_rng(seed)
    check_gradients(lambda b, p, q: b.div(p, q), [x, y], rng)
    check_gradients(lambda b, p, q: b.pow(p, q), [x, y], rng)


UNARY = {
    "Exp": (lambda b, x: b.Exp(x), _normal),
    "Log": (lambda b, x: b.Log(x), _positive),
    "Sqrt": (lambda b, x: b.Sqrt(x), _positive),
    "Tanh": (lambda b, x: b.Tanh(x), _normal),
    "Erf": (lambda b, x: b.Erf(x), _normal),
    "Relu": (lambda b, x: b.Relu(x), _normal),
    "Sigmoid": (lambda b, x: b.Sigmoid(x), _normal),
    "Gelu": (lambda b, x: b.Gelu(x), _normal),
    "Softmax": (lambda b, x: b.Softmax(x, axis=1), _normal),
    "LogSoftmax": (lambda b, x: b.LogSoftmax(x, axis=1), _normal),
    "ReduceSum": (lambda b, x: b.ReduceSum(x, axes=(1,)), _normal),
    "ReduceMax": (lambda b, x: b.ReduceMax(x, axes=(0,)), _normal),
    "Transpose": (lambda b, x: b.Transpose(x, shuffle=(1, 0)), _normal),
    "Reshape": (lambda b, x: b.Reshape(x, shape=(x.type.size,)), _normal),
    "Sin": (lambda b, x: b.Sin(x), _normal),
    "Cos": (lambda b, x: b.Cos(x), _normal),
    "Atan": (lambda b, x: b.Atan(x), _normal),
    "Floor": (lambda b, x: b.Floor(x), _normal),
    "CumReduce": (lambda b, x: b.CumReduce(x, axis=1), _normal),
    "CumReduce-exclusive-reverse": (
        lambda b, x: b.CumReduce(x, axis=0, exclusive=True, reverse=True),
        _normal,
    ),
    "Convert": (lambda b, x: b.Convert(x, elem="float64"), _normal),
    "LayerNorm": (
        lambda b, x: b.LayerNorm(
            x,
            b.constant(np.full(x.type.shape[1:], 1.5), dtype=np.float64),
            b.constant(np.zeros(x.type.shape[1:]), dtype=np.float64),
            axis=1,
        ),
        _normal,
    ),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@settings_small
@given(m=dims, n=dims, seed=seeds)
def test_unary(op: str, m: int, n: int, seed: int) -> None:
    build, values = UNARY[op]
    check_gradients(build, values(seed, (m, n)), np.random.default_rng(seed))


@settings_small
@given(m=dims, k=dims, n=dims, batch=dims, seed=seeds)
def test_matmul_batch_matmul_fully_connected(m: int, k: int, n: int, batch: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    check_gradients(lambda b, x, y: b.MatMul(x, y), _normal(seed, (m, k), (k, n)), rng)
    check_gradients(lambda b, x, y: b.BatchMatMul(x, y), _normal(seed, (batch, m, k), (batch, k, n)), rng)
    fc = _normal(seed, (m, k), (k, n), (n,))
    check_gradients(lambda b, x, w, c: b.FullyConnected(x, w, c), fc, rng)


@settings_small
@given(m=dims, a=dims, c=dims, seed=seeds)
def test_concat_and_select(m: int, a: int, c: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    check_gradients(lambda b, x, y: b.Concat(x, y, axis=1), _normal(seed, (m, a), (m, c)), rng)

    def select(b, x, y):
        return b.Select(b.Compare(x, y, predicate="lt"), x, y)

    check_gradients(select, _normal(seed, (m, a), (m, a)), rng)


@settings_small
@given(n=dims, classes=st.integers(2, 5), seed=seeds)
def test_softmax_cross_entropy(n: int, classes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = np.eye(classes)[rng.integers(0, classes, n)]

    def loss(b, logits):
        return softmax_cross_entropy(b, logits, b.constant(labels, name="labels", dtype=np.float64))

    check_gradients(loss, _normal(seed, (n, classes)), rng)


@settings(max_examples=12, deadline=None)
@given(
    group=st.integers(1, 3),
    cin_g=st.integers(1, 2),
    cout_g=st.integers(1, 2),
    size=st.integers(5, 7),  # at least the widest dilated span (2 * (3 - 1) + 1) with no pads
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    seed=seeds,
)
def test_convolution(group, cin_g, cout_g, size, kernel, strides, dilations, pads, seed) -> None:
    """Groups, strides, dilations and asymmetric pads, including pads wider than the kernel
    span (the transposed convolution then crops instead of padding)."""
    x, w = _normal(seed, (2, group * cin_g, size, size + 1), (group * cout_g, cin_g, *kernel))

    def conv(b, x, w):
        return b.Convolution(x, w, strides=strides, pads=pads, dilations=dilations, group=group)

    check_gradients(conv, [x, w], np.random.default_rng(seed))


@settings(max_examples=12, deadline=None)
@given(
    size=st.integers(3, 6),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padded=st.booleans(),
    count_include_pad=st.booleans(),
    seed=seeds,
)
def test_pools(size, kernel, strides, padded, count_include_pad, seed) -> None:
    pads = tuple(min(1, k - 1) for k in kernel) * 2 if padded else (0, 0, 0, 0)
    rng = np.random.default_rng(seed)
    (x,) = _normal(seed, (2, 3, size, size + 1))
    attrs = {"kernel": kernel, "strides": strides, "pads": pads}
    check_gradients(lambda b, v: b.MaxPool(v, **attrs), [x], rng)
    check_gradients(lambda b, v: b.AvgPool(v, count_include_pad=count_include_pad, **attrs), [x], rng)


@st.composite
def _slices(draw):
    """A shape and one (start, end, step) per axis, clamped as the Slice primitive expects
    (a negative step may end at -1, "past the front"); at least one element is read."""
    rank = draw(st.integers(1, 3))
    shape, starts, ends, steps = [], [], [], []
    for _ in range(rank):
        d = draw(st.integers(1, 6))
        step = draw(st.sampled_from([1, 2, 3, -1, -2]))
        if step > 0:
            start = draw(st.integers(0, d - 1))
            end = draw(st.integers(start + 1, d))
        else:
            start = draw(st.integers(0, d - 1))
            end = draw(st.integers(-1, start - 1))
        shape.append(d), starts.append(start), ends.append(end), steps.append(step)
    return tuple(shape), tuple(starts), tuple(ends), tuple(steps)


@settings(max_examples=25, deadline=None)
@given(case=_slices(), seed=seeds)
def test_slice(case, seed: int) -> None:
    shape, starts, ends, steps = case
    rng = np.random.default_rng(seed)
    check_gradients(lambda b, x: b.Slice(x, starts=starts, ends=ends, steps=steps), _normal(seed, shape), rng)


@settings_small
@given(m=dims, n=dims, pads=st.tuples(*[st.integers(0, 2)] * 4), seed=seeds)
def test_pad(m: int, n: int, pads, seed: int) -> None:
    rng = np.random.default_rng(seed)
    check_gradients(lambda b, x: b.Pad(x, pads=pads, value=0.5), _normal(seed, (m, n)), rng)


@settings_small
@given(rows=dims, cols=dims, picks=st.integers(1, 6), axis=st.integers(0, 1), seed=seeds)
def test_gather(rows: int, cols: int, picks: int, axis: int, seed: int) -> None:
    """Repeated and negative indices: each row's gradient is the sum over its reads."""
    rng = np.random.default_rng(seed)
    extent = (rows, cols)[axis]
    indices = rng.integers(-extent, extent, (picks, 2))

    def gather(b, x):
        return b.Gather(x, b.constant(indices, name="indices", dtype=np.int64), axis=axis)

    check_gradients(gather, _normal(seed, (rows, cols)), rng)


@settings_small
@given(
    heads=st.integers(1, 2), seq=dims, keys=dims, size=dims, softcap=st.sampled_from([0.0, 2.0]), seed=seeds
)
def test_attention(heads: int, seq: int, keys: int, size: int, softcap: float, seed: int) -> None:
    """Attention differentiated through its lowering (BatchMatMul, Softmax, Tanh cap)."""
    q, k, v = _normal(seed, (1, heads, seq, size), (1, heads, keys, size), (1, heads, keys, size))

    def attend(b, q, k, v):
        return b.Attention(q, k, v, scale=0.5, softcap=softcap)

    check_gradients(attend, [q, k, v], np.random.default_rng(seed))


@settings_small
@given(m=dims, n=dims, seed=seeds)
def test_mean_squared_error(m: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    check_gradients(lambda b, p, t: mean_squared_error(b, p, t), _normal(seed, (m, n), (m, n)), rng)


# ---- refusals ---------------------------------------------------------------------------


def _running_product_module(rng: np.random.Generator, op: str = "prod") -> Module:
    """A table read through a running product (CumReduce), which has no gradient rule."""
    module = Module("running")
    fn = module.create_function()
    b = fn.builder()
    table = b.constant(rng.standard_normal((5, 4)), name="table")
    rows = b.CumReduce(table, axis=0, op=op)
    b.save(b.ReduceSum(rows, axes=(0, 1)), "objective")
    return module


def test_missing_rule_names_node_and_kind(rng: np.random.Generator) -> None:
    module = _running_product_module(rng)
    with pytest.raises(
        DifferentiationError, match=r"node 'cumreduce' of kind CumReduce has no gradient rule"
    ):
        differentiate(module.function, "objective", ["table"])


def test_non_scalar_loss_and_unknown_params_are_refused(rng: np.random.Generator) -> None:
    module = _running_product_module(rng)
    fn = module.function
    rows = next(fn.nodes_of("CumReduce"))
    with pytest.raises(DifferentiationError, match=r"must be a float tensor of one element"):
        differentiate(fn, rows, ["table"])
    with pytest.raises(DifferentiationError, match=r"parameter 'nope' is not a Constant read by"):
        differentiate(fn, "objective", ["nope"])
    with pytest.raises(DifferentiationError, match=r"'missing' is not an output"):
        differentiate(fn, "missing", ["table"])
    # Nothing half-done: the function itself is untouched by the refusals.
    assert {n.kind for n in fn.nodes} == {"CumReduce", "ReduceSum", "Save"}
