"""Per-op tests of the ONNX frontend against onnxruntime and onnx.reference.

Each test builds a one-node (or tiny) ONNX model, loads it with ``load_onnx``, evaluates
the glow graph with the primitives' reference semantics and compares with the reference
runtimes on seeded random inputs (a different seed per test, never all zeros).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import check, kinds, normal, one, positive

from glow_core.errors import ShapeError, UnsupportedOpError
from glow_core.frontends.onnx import load_onnx
from glow_core.lowering.evaluate import evaluate

# ---- element-wise ----------------------------------------------------------------------------

UNARY = [
    ("Relu", {}, False),
    ("Sigmoid", {}, False),
    ("Tanh", {}, False),
    ("Erf", {}, False),
    ("Exp", {}, False),
    ("Neg", {}, False),
    ("Abs", {}, False),
    ("Identity", {}, False),
    ("Sqrt", {}, True),
    ("Log", {}, True),
    ("Reciprocal", {}, True),
    ("LeakyRelu", {}, False),
    ("LeakyRelu", {"alpha": 0.3}, False),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, False),
    ("HardSwish", {}, False),
]


@pytest.mark.parametrize(("op", "attrs", "pos"), UNARY, ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(UNARY)])
def test_unary(rng: np.random.Generator, op: str, attrs: dict, pos: bool) -> None:
    x = (positive if pos else normal)(rng, 2, 3, 5) * (1 if pos else 3)
    check(one(op, ["x"], {"x": x}, **attrs), {"x": x}, engines=("ort", "ref"))


BROADCASTS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 4), ())]


@pytest.mark.parametrize("rhs_const", [False, True])
@pytest.mark.parametrize(("lhs_shape", "rhs_shape"), BROADCASTS)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"])
def test_binary_broadcasting(rng, op: str, lhs_shape, rhs_shape, rhs_const: bool) -> None:
    lhs = positive(rng, *lhs_shape) if op == "Pow" else normal(rng, *lhs_shape)
    rhs = positive(rng, *rhs_shape) if op == "Div" else normal(rng, *rhs_shape)
    feeds = {"a": lhs} if rhs_const else {"a": lhs, "b": rhs}
    model = one(op, ["a", "b"], feeds, inits={"b": rhs} if rhs_const else None)
    check(model, feeds)


def test_pow_with_integer_exponent(rng) -> None:
    x = normal(rng, 3, 4)
    check(one("Pow", ["x", "e"], {"x": x}, inits={"e": np.array(3, np.int64)}), {"x": x})


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(rng, op: str, count: int) -> None:
    shapes = [(2, 3), (3,), (1, 3)][:count]
    feeds = {f"x{i}": normal(rng, *s) for i, s in enumerate(shapes)}
    check(one(op, list(feeds), feeds), feeds)


@pytest.mark.parametrize(
    ("opset", "bounds"),
    [
        (7, {"min": -0.5, "max": 0.7}),
        (10, {"min": 0.0}),
        (11, (-0.5, 0.7)),
        (13, (0.1, None)),
        (17, (None, 0.2)),
        (17, (None, None)),
        (17, (0.5, -0.5)),
    ],
)
def test_clip(rng, opset: int, bounds) -> None:
    x = normal(rng, 4, 5)
    if isinstance(bounds, dict):
        check(one("Clip", ["x"], {"x": x}, opset=opset, **bounds), {"x": x})
        return
    names, inits = ["x"], {}
    for key, value in zip(("lo", "hi"), bounds, strict=True):
        names.append(key if value is not None else "")
        if value is not None:
            inits[key] = np.array(value, np.float32)
    check(one("Clip", names, {"x": x}, inits=inits, opset=opset), {"x": x})


def test_clip_with_runtime_bounds(rng) -> None:
    feeds = {"x": normal(rng, 3, 4), "lo": np.array(-0.3, np.float32), "hi": np.array(0.6, np.float32)}
    check(one("Clip", ["x", "lo", "hi"], feeds), feeds)
    only_high = {"x": feeds["x"], "hi": normal(rng)}
    check(one("Clip", ["x", "", "hi"], only_high), only_high)


# ---- convolution and pooling ---------------------------------------------------------------

CONVS = [
    ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 9, 7), (6, 2, 3, 2), {"strides": [2, 1], "group": 2}),
    ((1, 5, 6, 6), (5, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 5}),
    ((1, 2, 11, 11), (3, 2, 3, 3), {"dilations": [2, 2], "pads": [0, 1, 2, 0]}),
    ((1, 2, 7, 8), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 9, 9), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 2, 9, 8), (3, 2, 3, 2), {"auto_pad": "VALID", "strides": [2, 3]}),
    ((1, 2, 9, 8), (3, 2, 3, 3), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "dilations": [2, 1]}),
    ((2, 3, 10), (4, 3, 3), {"pads": [1, 2], "strides": [2]}),
    ((1, 4, 9), (4, 2, 4), {"auto_pad": "SAME_UPPER", "group": 2, "dilations": [2]}),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONVS)
def test_conv(rng, x_shape, w_shape, attrs, bias: bool) -> None:
    x, w = normal(rng, *x_shape), normal(rng, *w_shape)
    inits = {"w": w, "b": normal(rng, w_shape[0])} if bias else {"w": w}
    # onnxruntime refuses dilations with auto_pad SAME; onnx.reference computes them.
    engines = ("ref",) if "SAME" in attrs.get("auto_pad", "") and "dilations" in attrs else ("ort",)
    check(one("Conv", ["x", *inits], {"x": x}, inits=inits, **attrs), {"x": x}, engines=engines)


def test_conv_with_runtime_weights(rng) -> None:
    feeds = {"x": normal(rng, 1, 2, 5, 5), "w": normal(rng, 3, 2, 3, 3)}
    check(one("Conv", ["x", "w"], feeds), feeds)


def test_conv_4d_is_refused_clearly(rng) -> None:
    x, w = normal(rng, 1, 1, 3, 3, 3, 3), normal(rng, 1, 1, 2, 2, 2, 2)
    with pytest.raises(UnsupportedOpError, match=r"conv_node.*only 1-D, 2-D and .* 3-D"):
        load_onnx(one("Conv", ["x", "w"], {"x": x}, inits={"w": w}))


# ---- matrix products -------------------------------------------------------------------------

GEMMS = [
    ((3, 5), (5, 4), (4,), {}),
    ((5, 3), (5, 4), (3, 4), {"transA": 1}),
    ((3, 5), (4, 5), (1, 4), {"transB": 1}),
    ((5, 3), (4, 5), (), {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    ((3, 5), (5, 4), None, {"alpha": 2.0}),
    ((3, 5), (5, 4), (3, 1), {"beta": 0.0}),
    ((3, 5), (4, 5), (4,), {"transB": 1, "beta": -1.5}),
]


@pytest.mark.parametrize("b_const", [True, False])
@pytest.mark.parametrize(("a_shape", "b_shape", "c_shape", "attrs"), GEMMS)
def test_gemm(rng, a_shape, b_shape, c_shape, attrs, b_const: bool) -> None:
    feeds = {"a": normal(rng, *a_shape)}
    inits = {"c": normal(rng, *c_shape)} if c_shape is not None else {}
    (inits if b_const else feeds)["b"] = normal(rng, *b_shape)
    check(
        one("Gemm", ["a", "b", *(["c"] if c_shape is not None else [])], feeds, inits=inits, **attrs), feeds
    )


def test_gemm_dense_layer_is_one_fully_connected(rng) -> None:
    feeds = {"a": normal(rng, 2, 6)}
    inits = {"w": normal(rng, 3, 6), "c": normal(rng, 3)}
    module = check(one("Gemm", ["a", "w", "c"], feeds, inits=inits, transB=1), feeds)
    assert kinds(module) == ["FullyConnected", "Save"]


MATMULS = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 5))]
MATMULS += [((3, 4), (4,)), ((2, 3, 4), (2, 4, 5)), ((4,), (2, 4, 3))]


@pytest.mark.parametrize("rhs_const", [True, False])
@pytest.mark.parametrize(("a_shape", "b_shape"), MATMULS)
def test_matmul(rng, a_shape, b_shape, rhs_const: bool) -> None:
    feeds, rhs = {"a": normal(rng, *a_shape)}, normal(rng, *b_shape)
    if not rhs_const:
        feeds["b"] = rhs
    check(one("MatMul", ["a", "b"], feeds, inits={"b": rhs} if rhs_const else None), feeds)


# ---- normalizations and softmax ------------------------------------------------------------


@pytest.mark.parametrize("opset", [7, 9, 15])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3)])
def test_batch_norm(rng, shape, opset: int) -> None:
    x, c = normal(rng, *shape), shape[1]
    inits = {"s": normal(rng, c), "b": normal(rng, c), "m": normal(rng, c), "v": positive(rng, c)}
    model = one("BatchNormalization", ["x", *inits], {"x": x}, inits=inits, opset=opset, epsilon=1e-3)
    check(model, {"x": x})


def test_batch_norm_refuses_training_outputs(rng) -> None:
    x, c = normal(rng, 2, 3, 4), 3
    inits = {"s": normal(rng, c), "b": normal(rng, c), "m": normal(rng, c), "v": positive(rng, c)}
    model = one("BatchNormalization", ["x", *inits], {"x": x}, inits=inits, outputs=["y", "rm", "rv"])
    with pytest.raises(UnsupportedOpError, match=r"batchnormalization_node.*output 1 \('rm'\)"):
        load_onnx(model)
    model.graph.output.pop()
    model.graph.output.pop()  # named but unused training outputs are ignored
    assert evaluate(load_onnx(model), {"x": x})["y"].shape == x.shape


@pytest.mark.parametrize(("axis", "bias"), [(-1, True), (1, True), (-1, False)])
def test_layer_norm(rng, axis: int, bias: bool) -> None:
    x = normal(rng, 2, 3, 4)
    norm_shape = x.shape[axis:]
    inits = {"s": normal(rng, *norm_shape)} | ({"b": normal(rng, *norm_shape)} if bias else {})
    check(one("LayerNormalization", ["x", *inits], {"x": x}, inits=inits, axis=axis), {"x": x})


@pytest.mark.parametrize(
    ("opset", "axis"), [(11, None), (11, 0), (11, 2), (11, -2), (13, None), (13, 1), (17, 0)]
)
def test_softmax(rng, opset: int, axis: int | None) -> None:
    x = normal(rng, 2, 3, 4) * 3
    attrs = {} if axis is None else {"axis": axis}
    # onnx.reference implements only the opset-13 meaning, so older opsets check against onnxruntime.
    engines = ("ort", "ref") if opset >= 13 else ("ort",)
    check(one("Softmax", ["x"], {"x": x}, opset=opset, **attrs), {"x": x}, engines=engines)


# ---- reductions --------------------------------------------------------------------------

REDUCES = [
    ("ReduceMean", 17, {"axes": [1]}, None),
    ("ReduceMean", 17, {"axes": [1, -1], "keepdims": 0}, None),
    ("ReduceMean", 18, {}, [0, 2]),
    ("ReduceSum", 11, {"axes": [0]}, None),
    ("ReduceSum", 13, {"keepdims": 0}, [-1]),
    ("ReduceSum", 13, {"noop_with_empty_axes": 1}, None),
    ("ReduceMax", 17, {"keepdims": 0}, None),
    ("ReduceMax", 18, {}, [1]),
    ("ReduceMin", 17, {"axes": [2]}, None),
]


@pytest.mark.parametrize(("op", "opset", "attrs", "axes"), REDUCES)
def test_reduce(rng, op: str, opset: int, attrs: dict, axes) -> None:
    x = normal(rng, 2, 3, 4)
    inits = {"axes": np.array(axes, np.int64)} if axes is not None else None
    model = one(op, ["x", "axes"] if axes is not None else ["x"], {"x": x}, inits=inits, opset=opset, **attrs)
    check(model, {"x": x}, engines=("ort", "ref"))


# ---- data movement ---------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 3])
def test_flatten(rng, axis: int) -> None:
    x = normal(rng, 2, 3, 4)
    check(one("Flatten", ["x"], {"x": x}, axis=axis), {"x": x})


@pytest.mark.parametrize("target", [[0, -1], [-1], [2, 0, -1], [2, 12, 1], [3, -1, 2]])
def test_reshape(rng, target) -> None:
    x = normal(rng, 4, 3, 2)
    check(one("Reshape", ["x", "s"], {"x": x}, inits={"s": np.array(target, np.int64)}), {"x": x})


def test_reshape_allowzero_keeps_zero_literal(rng) -> None:
    x = normal(rng, 2, 6)
    model = one("Reshape", ["x", "s"], {"x": x}, inits={"s": np.array([0, 12], np.int64)}, allowzero=1)
    with pytest.raises(ShapeError, match=r"reshape_node.*Reshape"):
        load_onnx(model)
    check(
        one("Reshape", ["x", "s"], {"x": x}, inits={"s": np.array([3, -1], np.int64)}, allowzero=1), {"x": x}
    )


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(rng, perm) -> None:
    x = normal(rng, 2, 3, 4)
    check(one("Transpose", ["x"], {"x": x}, **({"perm": perm} if perm else {})), {"x": x})


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_concat(rng, axis: int) -> None:
    feeds = {"a": normal(rng, 2, 3, 4)}
    other = list(feeds["a"].shape)
    other[axis] = 2
    check(one("Concat", ["a", "c", "a"], feeds, inits={"c": normal(rng, *other)}, axis=axis), feeds)


SPLITS = [
    (17, {"axis": 1}, None, 3),
    (17, {"axis": 1}, [1, 2, 3], 3),
    (17, {"axis": -1}, [2, 1], 2),
    (11, {"axis": 1, "split": [2, 4]}, None, 2),
    (11, {}, None, 2),
    (18, {"axis": 2, "num_outputs": 3}, None, 3),
]


@pytest.mark.parametrize(("opset", "attrs", "sizes", "count"), SPLITS)
def test_split(rng, opset: int, attrs: dict, sizes, count: int) -> None:
    x = normal(rng, 4, 6, 7) if opset == 18 else normal(rng, 2, 6, 3)
    inits = {"split": np.array(sizes, np.int64)} if sizes else None
    outs = [f"y{i}" for i in range(count)]
    model = one(
        "Split", ["x", "split"] if sizes else ["x"], {"x": x}, inits=inits, outputs=outs, opset=opset, **attrs
    )
    module = check(model, {"x": x}, engines=("ort", "ref"))
    assert kinds(module).count("Slice") == count


BIG = 2**63 - 1
SLICES = [
    ((10,), [1], [8], None, None),
    ((10,), [9], [0], None, [-2]),
    ((10,), [-1], [-BIG - 1], None, [-1]),
    ((4, 6), [1, 10], [3, 20], None, None),
    ((4, 6, 5), [-3, 1], [-1, BIG], [2, 0], [1, 2]),
    ((5, 7), [4, -2], [0, 0], [0, 1], [-1, -3]),
    ((5, 7), [BIG, -100], [-BIG - 1, BIG], [-2, 1], [-2, 3]),
]


@pytest.mark.parametrize(("shape", "starts", "ends", "axes", "steps"), SLICES)
def test_slice(rng, shape, starts, ends, axes, steps) -> None:
    x = normal(rng, *shape)
    inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64)}
    names = ["x", "s", "e", "a" if axes is not None else "", "st" if steps is not None else ""]
    while not names[-1]:
        names.pop()
    for key, value in (("a", axes), ("st", steps)):
        if value is not None:
            inits[key] = np.array(value, np.int64)
    check(one("Slice", names, {"x": x}, inits=inits), {"x": x})


def test_slice_opset9_attribute_form(rng) -> None:
    x = normal(rng, 5, 6)
    model = one("Slice", ["x"], {"x": x}, opset=9, starts=[1, 0], ends=[3, -1], axes=[0, 1])
    check(model, {"x": x}, engines=("ort", "ref"))


GATHERS = [((5, 4), [0, -1, 3], 0), ((3, 6), [[1, 2], [-1, 0]], 1), ((4, 3), 2, 0), ((2, 3, 4), [3, 0], -1)]


@pytest.mark.parametrize("runtime_indices", [False, True])
@pytest.mark.parametrize(("shape", "indices", "axis"), GATHERS)
def test_gather(rng, shape, indices, axis: int, runtime_indices: bool) -> None:
    feeds, idx = {"x": normal(rng, *shape)}, np.array(indices, np.int64)
    if runtime_indices:
        feeds["i"] = idx
    check(one("Gather", ["x", "i"], feeds, inits=None if runtime_indices else {"i": idx}, axis=axis), feeds)


def test_gather_from_constant_table(rng) -> None:
    feeds = {"i": np.array([[3, 1], [0, 2]], np.int64)}
    check(one("Gather", ["t", "i"], feeds, inits={"t": normal(rng, 4, 5)}), feeds)


def test_gather_out_of_range_names_node(rng) -> None:
    x = normal(rng, 3, 2)
    with pytest.raises(ShapeError, match=r"gather_node.*Gather.*out of range"):
        load_onnx(one("Gather", ["x", "i"], {"x": x}, inits={"i": np.array([3], np.int64)}))


@pytest.mark.parametrize(("op", "opset", "shape", "axes"), [
    ("Squeeze", 11, (1, 3, 1, 2), [0, 2]),
    ("Squeeze", 13, (1, 3, 1, 2), [-2]),
    ("Squeeze", 13, (1, 3, 1, 2), None),
    ("Unsqueeze", 11, (3, 2), [0, 3]),
    ("Unsqueeze", 13, (3, 2), [-1]),
    ("Unsqueeze", 13, (3, 2), [1, 0]),
])  # fmt: skip
def test_squeeze_unsqueeze(rng, op: str, opset: int, shape, axes) -> None:
    x = normal(rng, *shape)
    if opset < 13:
        model = one(op, ["x"], {"x": x}, opset=opset, **({"axes": axes} if axes else {}))
    else:
        inits = {"axes": np.array(axes, np.int64)} if axes else None
        model = one(op, ["x", "axes"] if axes else ["x"], {"x": x}, inits=inits, opset=opset)
    check(model, {"x": x})


def test_squeeze_of_wide_axis_names_node(rng) -> None:
    x = normal(rng, 2, 3)
    with pytest.raises(ShapeError, match=r"squeeze_node.*Squeeze.*not 1"):
        load_onnx(one("Squeeze", ["x", "a"], {"x": x}, inits={"a": np.array([1], np.int64)}))


PADS = [
    (17, (2, 3), [1, 0, 2, 3], 1.5, None),
    (17, (1, 2, 4, 4), [0, 0, 1, 1, 0, 0, 1, 1], None, None),
    (17, (3, 5), [1, -1, -1, 2], 0.5, None),
    (18, (2, 3, 4), [1, 2, 0, 3], -2.0, [1, -1]),
]


@pytest.mark.parametrize(("opset", "shape", "pads", "value", "axes"), PADS)
def test_pad(rng, opset: int, shape, pads, value, axes) -> None:
    x = normal(rng, *shape)
    inits = {"p": np.array(pads, np.int64)}
    names = ["x", "p"]
    if value is not None or axes is not None:
        names.append("v" if value is not None else "")
        if value is not None:
            inits["v"] = np.array(value, np.float32)
    if axes is not None:
        names.append("a")
        inits["a"] = np.array(axes, np.int64)
    check(one("Pad", names, {"x": x}, inits=inits, opset=opset), {"x": x})


def test_pad_attribute_form_and_other_modes(rng) -> None:
    x = normal(rng, 3, 4)
    check(one("Pad", ["x"], {"x": x}, opset=7, pads=[1, 1, 0, 2], value=-1.0), {"x": x})
    pads = {"p": np.array([2, 1, 1, 3], np.int64)}
    for mode in ("reflect", "edge", "wrap"):
        check(one("Pad", ["x", "p"], {"x": x}, inits=pads, mode=mode, opset=19), {"x": x}, engines=("ref",))
    model = one("Pad", ["x", "p"], {"x": x}, inits={"p": np.array([1, 1, 1, 1], np.int64)}, mode="mirror")
    with pytest.raises(UnsupportedOpError, match=r"pad_node.*'mirror' is not one of"):
        load_onnx(model)


def test_expand(rng) -> None:
    x = normal(rng, 3, 1)
    check(one("Expand", ["x", "s"], {"x": x}, inits={"s": np.array([2, 1, 4], np.int64)}), {"x": x})


@pytest.mark.parametrize("opset", [7, 12, 13])
def test_dropout_is_identity_with_true_mask(rng, opset: int) -> None:
    x = normal(rng, 3, 4)
    model = one("Dropout", ["x"], {"x": x}, opset=opset, outputs={"y": 1, "mask": 9})
    if opset < 10:  # the mask was float before opset 10
        model = one("Dropout", ["x"], {"x": x}, opset=opset)
    check(model, {"x": x})


def test_dropout_training_is_refused(rng) -> None:
    x = normal(rng, 3)
    inits = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    with pytest.raises(UnsupportedOpError, match=r"dropout_node.*training_mode"):
        load_onnx(one("Dropout", ["x", "r", "t"], {"x": x}, inits=inits))
