"""ONNX coverage (issue 8), part 3: pooling beyond 2-D, spectral, sampling, quantization,
bit shifts, small linear algebra and the newer (opset 23-28) model-building ops."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_cases import I64, F, check, ints, model_of, normal, one

from glow_core.errors import UnsupportedOpError
from glow_core.frontends.onnx import load_onnx

# ---- pooling by window gathering ------------------------------------------------------------------

POOLS = [
    (
        "MaxPool",
        (1, 2, 5, 6, 7),
        {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1]},
    ),
    ("AveragePool", (1, 2, 5, 6, 7), {"kernel_shape": [3, 2, 2], "pads": [1, 1, 0, 1, 0, 1]}),
    (
        "AveragePool",
        (1, 2, 5, 6, 7),
        {"kernel_shape": [3, 2, 2], "pads": [1, 1, 0, 1, 0, 1], "count_include_pad": 1},
    ),
    (
        "MaxPool",
        (1, 2, 8, 9),
        {"kernel_shape": [3, 2], "dilations": [2, 3], "ceil_mode": 1, "strides": [2, 2]},
    ),
    (
        "AveragePool",
        (1, 1, 9, 9),
        {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    ),
    ("LpPool", (1, 2, 6, 7), {"kernel_shape": [3, 3], "p": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("LpPool", (1, 2, 7), {"kernel_shape": [3], "p": 1, "auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize(("op", "shape", "attrs"), POOLS)
def test_window_gather_pooling(rng, op: str, shape, attrs: dict) -> None:
    x = normal(rng, *shape)
    check(one(op, ["x"], {"x": x}, opset=19, **attrs), {"x": x}, engines=("ref",))


def test_maxpool_indices_and_maxunpool(rng) -> None:
    x = normal(rng, 2, 3, 6, 6)
    for order in (0, 1):
        model = one(
            "MaxPool",
            ["x"],
            {"x": x},
            kernel_shape=[2, 2],
            strides=[2, 2],
            storage_order=order,
            outputs={"y": F, "i": I64},
        )
        check(model, {"x": x})
    values, idx = normal(rng, 1, 1, 2, 2), np.array([[[[5, 7], [13, 15]]]], np.int64)
    feeds = {"v": values, "i": idx}
    check(one("MaxUnpool", ["v", "i"], feeds, kernel_shape=[2, 2], strides=[2, 2]), feeds)
    model = one(
        "MaxUnpool",
        ["v", "i", "s"],
        feeds,
        kernel_shape=[2, 2],
        strides=[2, 2],
        inits={"s": np.array([1, 1, 5, 5], np.int64)},
    )
    check(model, feeds, engines=("ref",))  # onnxruntime reads the indices against output_shape


def test_col2im(rng) -> None:
    x = normal(rng, 1, 2 * 4, 6)  # C=2, 2x2 blocks, 2x3 block positions
    inits = {"image": np.array([3, 4], np.int64), "block": np.array([2, 2], np.int64)}
    check(one("Col2Im", ["x", "image", "block"], {"x": x}, inits=inits, opset=18), {"x": x}, engines=("ref",))
    x = normal(rng, 1, 4, 12)
    model = one(
        "Col2Im",
        ["x", "image", "block"],
        {"x": x},
        inits=inits,
        pads=[1, 0, 1, 1],
        strides=[1, 1],
        dilations=[1, 2],
        opset=18,  # Col2Im is an opset-18 op
    )
    check(model, {"x": x}, engines=("ref",))


def test_causal_conv_with_state(rng) -> None:
    x, w, bias, past = normal(rng, 2, 3, 5), normal(rng, 3, 1, 4), normal(rng, 3), normal(rng, 2, 3, 3)
    feeds = {"x": x, "past": past}
    model = one(
        "CausalConvWithState",
        ["x", "w", "b", "past"],
        feeds,
        inits={"w": w, "b": bias},
        activation="silu",
        outputs={"y": F, "state": F},
        opset=27,
    )
    check(model, feeds, engines=("ref",))


# ---- spectral ---------------------------------------------------------------------------------

DFTS = [
    ({}, (2, 8, 1), None),
    ({"inverse": 1}, (2, 8, 2), None),
    ({"onesided": 1}, (2, 8, 1), 10),
    ({"inverse": 1, "onesided": 1}, (2, 5, 2), None),
    ({}, (3, 6, 2), 4),
]


@pytest.mark.parametrize(("attrs", "shape", "length"), DFTS)
def test_dft(rng, attrs: dict, shape, length) -> None:
    x = normal(rng, *shape)
    inits = {"axis": np.array(1, np.int64)}
    ins = ["x", "", "axis"]
    if length is not None:
        inits["n"] = np.array(length, np.int64)
        ins[1] = "n"
    check(one("DFT", ins, {"x": x}, inits=inits, opset=20, **attrs), {"x": x}, engines=("ref",))


def test_stft(rng) -> None:
    x = normal(rng, 2, 32, 1)
    inits = {"step": np.array(4, np.int64), "window": np.hanning(8).astype(np.float32)}
    check(one("STFT", ["x", "step", "window"], {"x": x}, inits=inits), {"x": x}, engines=("ref",))


# ---- sampling at run-time coordinates -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(rng, mode: str, padding: str, align: int) -> None:
    x, grid = normal(rng, 1, 2, 4, 5), rng.uniform(-1.4, 1.4, (1, 3, 6, 2)).astype(np.float32)
    feeds = {"x": x, "grid": grid}
    model = one(
        "GridSample", ["x", "grid"], feeds, mode=mode, padding_mode=padding, align_corners=align, opset=20
    )
    check(model, feeds, engines=("ref",))


def test_grid_sample_volumetric_and_affine_grid(rng) -> None:
    x, grid = normal(rng, 1, 2, 3, 4, 5), rng.uniform(-1.1, 1.1, (1, 2, 3, 2, 3)).astype(np.float32)
    feeds = {"x": x, "grid": grid}
    check(one("GridSample", ["x", "grid"], feeds, mode="linear", opset=20), feeds, engines=("ref",))
    theta = normal(rng, 2, 2, 3)
    for align in (0, 1):
        model = one(
            "AffineGrid",
            ["t", "size"],
            {"t": theta},
            align_corners=align,
            inits={"size": np.array([2, 3, 4, 5], np.int64)},
            opset=20,
        )
        check(model, {"t": theta}, engines=("ref",))


def test_rotary_embedding(rng) -> None:
    x = normal(rng, 2, 3, 4, 8)  # [B, H, S, D]
    cos, sin = normal(rng, 6, 3), normal(rng, 6, 3)
    positions = ints(rng, 0, 6, 2, 4)
    feeds = {"x": x, "pos": positions}
    for interleaved in (0, 1):
        model = one(
            "RotaryEmbedding",
            ["x", "cos", "sin", "pos"],
            feeds,
            inits={"cos": cos, "sin": sin},
            interleaved=interleaved,
            rotary_embedding_dim=6,
            opset=23,
        )
        check(model, feeds, engines=("ref",))


# ---- quantization ---------------------------------------------------------------------------------


def test_quantize_dequantize_int8(rng) -> None:
    x = normal(rng, 2, 3, 4) * 3
    inits = {"s": np.array([0.05, 0.02, 0.1], np.float32), "z": np.array([3, -2, 0], np.int8)}
    model = one(
        "QuantizeLinear", ["x", "s", "z"], {"x": x}, axis=1, inits=inits, outputs={"y": TensorProto.INT8}
    )
    check(model, {"x": x})
    q = ints(rng, -128, 128, 2, 3, 4, dtype=np.int8)
    check(one("DequantizeLinear", ["q", "s", "z"], {"q": q}, axis=1, inits=inits), {"q": q})
    blocked = {"s": np.abs(normal(rng, 2, 3, 2)) + 0.01, "z": ints(rng, -5, 5, 2, 3, 2, dtype=np.int8)}
    model = one("DequantizeLinear", ["q", "s", "z"], {"q": q}, axis=2, block_size=2, inits=blocked, opset=21)
    check(model, {"q": q}, engines=("ref",))


def test_qlinear_matmul_int8(rng) -> None:
    a, w = ints(rng, -128, 128, 3, 4, dtype=np.int8), ints(rng, -128, 128, 4, 5, dtype=np.int8)
    inits = {
        "sa": np.array(0.02, np.float32),
        "za": np.array(1, np.int8),
        "w": w,
        "sw": np.array(0.03, np.float32),
        "zw": np.array(-2, np.int8),
        "sy": np.array(0.5, np.float32),
        "zy": np.array(4, np.int8),
    }
    model = one(
        "QLinearMatMul",
        ["a", "sa", "za", "w", "sw", "zw", "sy", "zy"],
        {"a": a},
        inits=inits,
        outputs={"y": TensorProto.INT8},
    )
    check(model, {"a": a})


# ---- integer arithmetic, shifts, small linear algebra -------------------------------------------


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_bit_shift_signed(rng, direction: str, dtype) -> None:
    bits = np.dtype(dtype).itemsize * 8
    x = ints(rng, -100, 100, 3, 8, dtype=dtype)
    s = ints(rng, -2, bits + 2, 3, 8, dtype=dtype)
    out = {"y": TensorProto.INT8 if dtype == np.int8 else (TensorProto.INT32 if dtype == np.int32 else I64)}
    feeds = {"x": x, "s": s}
    check(
        one("BitShift", ["x", "s"], feeds, direction=direction, outputs=out, opset=28),
        feeds,
        engines=("ref",),
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # onnx.reference's own inf % x
def test_integer_pow_mod_edges_and_det(rng) -> None:
    base, exponent = ints(rng, -5, 6, 3, 4, dtype=np.int32), ints(rng, 0, 5, 3, 4, dtype=np.int32)
    feeds = {"a": base, "e": exponent}
    check(one("Pow", ["a", "e"], feeds, outputs={"y": TensorProto.INT32}), feeds)
    a = np.array([0.0, -3.0, 3.0, -1.0, 1.0, np.inf, 5.0], np.float32)
    d = np.array([2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, -3.0], np.float32)
    check(one("Mod", ["a", "d"], {"a": a, "d": d}, fmod=0), {"a": a, "d": d}, engines=("ref",))
    for n in (2, 3, 4):
        m = normal(rng, 2, n, n)
        check(one("Det", ["m"], {"m": m}), {"m": m})


def test_batchnorm_training_and_zero_ratio_dropout(rng) -> None:
    x = normal(rng, 2, 3, 4, 5)
    inits = {k: np.abs(normal(rng, 3)) + 0.5 for k in ("s", "b", "m", "v")}
    model = one(
        "BatchNormalization",
        ["x", "s", "b", "m", "v"],
        {"x": x},
        training_mode=1,
        momentum=0.8,
        inits=inits,
        outputs={"y": F, "rm": F, "rv": F},
        opset=15,
    )
    check(model, {"x": x})
    model = one(
        "Dropout",
        ["x", "r", "t"],
        {"x": x},
        inits={"r": np.array(0.0, np.float32), "t": np.array(True)},
        outputs={"y": F, "mask": TensorProto.BOOL},
    )
    check(model, {"x": x}, engines=("ref",))
    model = one(
        "Dropout", ["x", "r", "t"], {"x": x}, inits={"r": np.array(0.5, np.float32), "t": np.array(True)}
    )
    with pytest.raises(UnsupportedOpError, match="training_mode=true"):
        load_onnx(model)


# ---- newer ops ------------------------------------------------------------------------------------


def test_swiglu_tensor_scatter_center_crop(rng) -> None:
    a, v = normal(rng, 3, 4), normal(rng, 3, 4)
    check(
        one("SwiGLU", ["a", "v"], {"a": a, "v": v}, alpha=1.5, opset=28), {"a": a, "v": v}, engines=("ref",)
    )
    cache, update = normal(rng, 2, 3, 6, 4), normal(rng, 2, 3, 2, 4)
    feeds = {"c": cache, "u": update, "w": np.array([1, 5], np.int64)}
    for mode in ("linear", "circular"):
        if mode == "linear":
            feeds["w"] = np.array([1, 4], np.int64)
        else:
            feeds["w"] = np.array([5, 2], np.int64)
        check(
            one("TensorScatter", ["c", "u", "w"], feeds, mode=mode, axis=2, opset=24), feeds, engines=("ref",)
        )
    x = normal(rng, 5, 4, 3)
    check(
        one(
            "CenterCropPad",
            ["x", "s"],
            {"x": x},
            inits={"s": np.array([3, 7], np.int64)},
            axes=[0, 1],
            opset=18,
        ),
        {"x": x},
    )


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise(rng, op: str) -> None:
    x, y = ints(rng, -1000, 1000, 3, 4, dtype=np.int32), ints(rng, -1000, 1000, 4, dtype=np.int32)
    feeds = {"x": x} if op == "BitwiseNot" else {"x": x, "y": y}
    check(one(op, list(feeds), feeds, outputs={"z": TensorProto.INT32}, opset=18), feeds)


def test_bit_cast_round_trip(rng) -> None:
    x = normal(rng, 3, 4)
    model = one("BitCast", ["x"], {"x": x}, to=TensorProto.INT32, outputs={"y": TensorProto.INT32}, opset=26)
    check(model, {"x": x}, engines=("ref",))


@pytest.mark.parametrize(
    ("mode", "weights"), [("TF", None), ("IDF", [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), ("TFIDF", [1.5] * 7)]
)
def test_tfidf_vectorizer(rng, mode: str, weights) -> None:
    x = ints(rng, 2, 9, 2, 8, dtype=np.int32)
    attrs = {
        "mode": mode,
        "min_gram_length": 1,
        "max_gram_length": 2,
        "max_skip_count": 2,
        "ngram_counts": [0, 4],
        "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
        "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
    }
    if weights is not None:
        attrs["weights"] = weights
    check(one("TfIdfVectorizer", ["x"], {"x": x}, **attrs), {"x": x})


def test_roi_align_and_deform_conv(rng) -> None:
    x = normal(rng, 2, 3, 8, 9)
    rois = np.array([[0.5, 1.0, 6.0, 7.5], [2.0, 0.0, 8.5, 4.0], [-1.0, 3.0, 4.0, 9.5]], np.float32)
    feeds = {"x": x, "rois": rois, "idx": np.array([1, 0, 1], np.int64)}
    for mode, ctm in (("avg", "half_pixel"), ("max", "output_half_pixel")):
        attrs = {
            "mode": mode,
            "coordinate_transformation_mode": ctm,
            "output_height": 3,
            "output_width": 2,
            "sampling_ratio": 2,
            "spatial_scale": 0.9,
        }
        check(one("RoiAlign", ["x", "rois", "idx"], feeds, opset=16, **attrs), feeds, engines=("ref",))
    x, w = normal(rng, 1, 4, 5, 5), normal(rng, 6, 2, 2, 3)
    offsets = normal(rng, 1, 2 * 2 * 6, 4, 3) * 1.5
    mask = rng.uniform(0, 1, (1, 2 * 6, 4, 3)).astype(np.float32)
    feeds = {"x": x, "o": offsets, "m": mask}
    model = one(
        "DeformConv",
        ["x", "w", "o", "b", "m"],
        feeds,
        inits={"w": w, "b": normal(rng, 6)},
        group=2,
        offset_group=2,
        pads=[0, 0, 0, 0],
        opset=19,
    )
    check(model, feeds)


def test_flex_attention_with_modifiers_and_optionals(rng) -> None:
    feeds = {"q": normal(rng, 1, 4, 3, 8), "k": normal(rng, 1, 2, 5, 8), "v": normal(rng, 1, 2, 5, 6)}
    score_mod = helper.make_graph(
        [helper.make_node("Tanh", ["s"], ["t"]), helper.make_node("Mul", ["t", "cap"], ["out"])],
        "score_mod",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("cap", TensorProto.FLOAT, [], [3.0])],
    )
    node = helper.make_node(
        "FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", score_mod=score_mod, scale=0.2
    )
    model = helper.make_model(
        helper.make_graph(
            [node],
            "flex",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)],
    )
    model.ir_version = 10
    check(model, feeds, engines=("ref",))
    x = normal(rng, 2, 3)
    nodes = [
        helper.make_node("Optional", ["x"], ["o"]),
        helper.make_node("OptionalGetElement", ["o"], ["y"]),
        helper.make_node("OptionalHasElement", [""], ["none"]),
    ]
    check(
        model_of(nodes, {"x": x}, outputs={"y": TensorProto.FLOAT, "none": TensorProto.BOOL}, opset=18),
        {"x": x},
        engines=("ort",),
    )
