"""ONNX coverage (issue 8), part 2: indexing, resampling, normalization, attention, losses,
recurrent layers, transposed convolution, einsum (control flow: test_onnx_control_flow.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import I64, F, check, ints, normal, one

# ---- indexing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(rng, axis: int) -> None:
    x = normal(rng, 3, 4, 5)
    shape = list(x.shape)
    shape[axis] = 2
    idx = ints(rng, -x.shape[axis], x.shape[axis], *shape)
    feeds = {"x": x, "i": idx}
    check(one("GatherElements", ["x", "i"], feeds, axis=axis), feeds)


@pytest.mark.parametrize(
    ("data", "idx", "batch"), [((4, 5), (3, 2), 0), ((2, 3, 4), (2, 1), 0), ((2, 3, 4), (2, 2, 1), 1)]
)
def test_gather_nd(rng, data, idx, batch: int) -> None:
    x = normal(rng, *data)
    k = idx[-1]
    high = np.array(data[batch : batch + k])
    i = (rng.integers(0, 1 << 30, idx) % high).astype(np.int64)
    feeds = {"x": x, "i": i}
    check(one("GatherND", ["x", "i"], feeds, batch_dims=batch), feeds)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(rng, reduction: str) -> None:
    x, u = normal(rng, 4, 5), normal(rng, 2, 5)
    i = np.stack([rng.permutation(4)[:2] for _ in range(5)], axis=1).astype(
        np.int64
    )  # no duplicates per column
    feeds = {"x": x, "i": i, "u": u}
    check(one("ScatterElements", ["x", "i", "u"], feeds, axis=0, reduction=reduction, opset=18), feeds)


def test_scatter_nd(rng) -> None:
    x, u = normal(rng, 4, 3, 2), normal(rng, 2, 3, 2)
    feeds = {"x": x, "i": np.array([[3], [1]], np.int64), "u": u}
    check(one("ScatterND", ["x", "i", "u"], feeds), feeds)
    feeds = {"x": x, "i": np.array([[0, 1], [-1, 2]], np.int64), "u": normal(rng, 2, 2)}
    check(one("ScatterND", ["x", "i", "u"], feeds, reduction="add", opset=18), feeds)


@pytest.mark.parametrize(("axis", "largest"), [(-1, 1), (0, 0)])
def test_top_k(rng, axis: int, largest: int) -> None:
    x = ints(rng, -3, 3, 4, 6).astype(np.float32)
    k = np.array([3], np.int64)
    model = one(
        "TopK", ["x", "k"], {"x": x}, axis=axis, largest=largest, inits={"k": k}, outputs={"v": F, "i": I64}
    )
    check(model, {"x": x})


def test_one_hot_trilu_cumsum(rng) -> None:
    idx = ints(rng, -3, 3, 2, 3)
    model = one(
        "OneHot",
        ["i", "d", "v"],
        {"i": idx},
        axis=1,
        inits={"d": np.array(3), "v": np.array([0.5, 2.0], np.float32)},
    )
    check(model, {"i": idx})
    x = normal(rng, 2, 4, 5)
    for upper, k in ((1, 1), (0, -1)):
        check(one("Trilu", ["x", "k"], {"x": x}, upper=upper, inits={"k": np.array(k)}), {"x": x})
    for exclusive, reverse in ((0, 0), (1, 1)):
        model = one(
            "CumSum", ["x", "a"], {"x": x}, exclusive=exclusive, reverse=reverse, inits={"a": np.array(1)}
        )
        check(model, {"x": x})


def test_reverse_sequence_compress_tile_eyelike(rng) -> None:
    x = normal(rng, 4, 3, 2)
    feeds = {"x": x, "lens": np.array([4, 1, 3], np.int64)}
    check(one("ReverseSequence", ["x", "lens"], feeds, batch_axis=1, time_axis=0), feeds)
    cond = np.array([True, False, True])
    check(one("Compress", ["x", "c"], {"x": x}, axis=1, inits={"c": cond}), {"x": x})
    check(one("Tile", ["x", "r"], {"x": x}, inits={"r": np.array([2, 1, 3], np.int64)}), {"x": x})
    check(one("EyeLike", ["e"], {"e": normal(rng, 3, 5)}, k=1), {"e": normal(rng, 3, 5)})


@pytest.mark.parametrize(
    ("op", "mode"), [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", "DCR")]
)
def test_depth_space(rng, op: str, mode: str) -> None:
    x = normal(rng, 1, 8, 2, 4) if op == "DepthToSpace" else normal(rng, 1, 2, 4, 6)
    kw = {"mode": mode} if op == "DepthToSpace" else {}
    check(one(op, ["x"], {"x": x}, blocksize=2, **kw), {"x": x})


# ---- resampling ---------------------------------------------------------------------------------

RESIZES = [
    ({"mode": "nearest"}, [1, 1, 2, 1.5], None),
    (
        {"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "half_pixel"},
        None,
        [1, 1, 7, 9],
    ),
    (
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        [1, 1, 0.5, 0.6],
        None,
    ),
    ({"mode": "linear"}, [1, 1, 1.7, 0.6], None),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [1, 1, 3, 8]),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None, [1, 1, 1, 5]),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.7], None),
    ({"mode": "cubic"}, [1, 1, 2.0, 1.3], None),
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [1, 1, 0.8, 1.6], None),
    ({"mode": "cubic", "antialias": 1}, None, [1, 1, 3, 2]),
    ({"mode": "linear", "keep_aspect_ratio_policy": "not_larger"}, None, [1, 1, 7, 7]),
]


@pytest.mark.parametrize(("attrs", "scales", "sizes"), RESIZES)
def test_resize(rng, attrs: dict, scales, sizes) -> None:
    x = normal(rng, 1, 2, 5, 6)
    inits = {"roi": np.array([], np.float32)}
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        ins = ["x", "roi", "scales"]
    else:
        inits["sizes"] = np.array(sizes, np.int64)
        ins = ["x", "roi", "", "sizes"]
    if attrs.get("keep_aspect_ratio_policy"):
        inits["sizes"] = np.array(sizes[2:], np.int64)
        attrs = {**attrs, "axes": [2, 3]}
    check(one("Resize", ins, {"x": x}, inits=inits, opset=19, **attrs), {"x": x}, engines=("ref",))


def test_resize_crop_and_resize_and_upsample(rng) -> None:
    x = normal(rng, 1, 1, 4, 5)
    inits = {
        "roi": np.array([0, 0, 0.4, 0.6, 1, 1, 1.2, 0.7], np.float32),
        "sizes": np.array([1, 1, 3, 3], np.int64),
    }
    attrs = {
        "coordinate_transformation_mode": "tf_crop_and_resize",
        "mode": "linear",
        "extrapolation_value": 9.0,
    }
    check(
        one("Resize", ["x", "roi", "", "sizes"], {"x": x}, inits=inits, **attrs), {"x": x}, engines=("ref",)
    )
    model = one("Upsample", ["x", "s"], {"x": x}, inits={"s": np.array([1, 1, 2, 3], np.float32)}, opset=9)
    check(model, {"x": x})


# ---- normalization ---------------------------------------------------------------------------


def test_layer_norm_statistics_outputs(rng) -> None:
    x, scale, bias = normal(rng, 2, 3, 4), normal(rng, 3, 4), normal(rng, 3, 4)
    outputs = {"y": F, "mean": F, "inv": F}
    model = one(
        "LayerNormalization",
        ["x", "s", "b"],
        {"x": x},
        axis=1,
        inits={"s": scale, "b": bias},
        outputs=outputs,
    )
    check(model, {"x": x})


@pytest.mark.parametrize(
    ("op", "attrs", "params"),
    [
        ("RMSNormalization", {"axis": -1}, [(4,)]),
        ("GroupNormalization", {"num_groups": 2}, [(4,), (4,)]),
        ("InstanceNormalization", {}, [(4,), (4,)]),
        ("LpNormalization", {"axis": 1, "p": 1}, []),
        ("MeanVarianceNormalization", {}, []),
        ("LRN", {"size": 3, "alpha": 0.01}, []),
    ],
)
def test_normalizations(rng, op: str, attrs: dict, params) -> None:
    x = normal(rng, 2, 4, 3, 5)
    if op == "RMSNormalization":
        x = normal(rng, 2, 3, 4)
    inits = {f"p{i}": normal(rng, *shape) for i, shape in enumerate(params)}
    opset = 23 if op == "RMSNormalization" else 21
    engines = ("ref",) if op in ("RMSNormalization", "GroupNormalization") else ("ort",)
    check(
        one(op, ["x", *inits], {"x": x}, inits=inits, opset=opset, **attrs),
        {"x": x},
        engines=engines,
    )


# ---- attention and losses ------------------------------------------------------------------------

ATTENTIONS = [
    ({}, {}),
    ({"is_causal": 1}, {}),
    ({"scale": 0.3, "softcap": 2.0}, {}),
    ({}, {"mask": "bool"}),
    ({"is_causal": 1}, {"mask": "float"}),
    ({"qk_matmul_output_mode": 2}, {"mask": "float", "past": True}),
    ({"qk_matmul_output_mode": 3, "is_causal": 1}, {"past": True}),
    ({}, {"gqa": True}),
    ({"is_causal": 1}, {"nonpad": True}),
]


@pytest.mark.parametrize(("attrs", "shape"), ATTENTIONS)
def test_attention_4d(rng, attrs: dict, shape: dict) -> None:
    kv_heads = 2 if shape.get("gqa") else 4
    feeds = {
        "q": normal(rng, 2, 4, 3, 8),
        "k": normal(rng, 2, kv_heads, 5, 8),
        "v": normal(rng, 2, kv_heads, 5, 6),
    }
    ins = ["q", "k", "v"]
    total = 5 + (2 if shape.get("past") else 0)
    if "mask" in shape:
        feeds["m"] = rng.random((3, total)) < 0.7 if shape["mask"] == "bool" else normal(rng, 1, 4, 3, total)
        ins.append("m")
    else:
        ins.append("")
    outputs = {"y": F}
    if shape.get("past"):
        feeds["pk"], feeds["pv"] = normal(rng, 2, kv_heads, 2, 8), normal(rng, 2, kv_heads, 2, 6)
        ins += ["pk", "pv"]
        outputs = {"y": F, "present_k": F, "present_v": F, "qk": F}
    if shape.get("nonpad"):
        feeds["lens"] = np.array([5, 3], np.int64)
        ins += ["", "", "lens"]
    check(one("Attention", ins, feeds, outputs=outputs, opset=24, **attrs), feeds, engines=("ref",))


def test_attention_3d_heads(rng) -> None:
    feeds = {"q": normal(rng, 2, 3, 16), "k": normal(rng, 2, 4, 8), "v": normal(rng, 2, 4, 8)}
    model = one("Attention", ["q", "k", "v"], feeds, q_num_heads=4, kv_num_heads=2, is_causal=1, opset=23)
    check(model, feeds, engines=("ref",))


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize(
    ("reduction", "weighted", "ignore"), [("mean", True, 1), ("sum", False, None), ("none", True, None)]
)
def test_losses(rng, op: str, reduction: str, weighted: bool, ignore) -> None:
    x = normal(rng, 3, 4, 2)
    if op == "NegativeLogLikelihoodLoss":
        x = -np.abs(x)
    feeds = {"x": x, "t": ints(rng, 0, 4, 3, 2)}
    feeds["t"][0, 0] = 1  # the ignored class occurs
    inits = {"w": np.abs(normal(rng, 4)) + 0.1} if weighted else {}
    kw = {"reduction": reduction} | ({"ignore_index": ignore} if ignore is not None else {})
    model = one(op, ["x", "t", *inits], feeds, inits=inits, **kw)
    check(model, feeds, engines=("ref",))


# ---- recurrent layers --------------------------------------------------------------------------

RECURRENT = [
    ("LSTM", "forward", {}),
    ("LSTM", "bidirectional", {"peepholes": True, "lens": True}),
    ("LSTM", "reverse", {"initial": True}),
    ("GRU", "forward", {"linear_before_reset": 1}),
    ("GRU", "bidirectional", {"lens": True}),
    ("GRU", "reverse", {"initial": True}),
    ("RNN", "bidirectional", {"lens": True, "initial": True}),
    ("RNN", "forward", {"layout": 1}),
]


@pytest.mark.parametrize(("op", "direction", "opts"), RECURRENT)
def test_recurrent(rng, op: str, direction: str, opts: dict) -> None:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs, seq, batch, width, hidden = (2 if direction == "bidirectional" else 1), 4, 3, 5, 6
    layout = opts.get("layout", 0)
    x = normal(rng, batch, seq, width) if layout else normal(rng, seq, batch, width)
    inits = {
        "w": normal(rng, dirs, gates * hidden, width) * 0.5,
        "r": normal(rng, dirs, gates * hidden, hidden) * 0.5,
        "b": normal(rng, dirs, 2 * gates * hidden) * 0.5,
    }
    ins = ["x", "w", "r", "b"]
    feeds = {"x": x}
    if opts.get("lens"):
        feeds["lens"] = np.array([4, 2, 3], np.int32)
    ins.append("lens" if opts.get("lens") else "")
    if opts.get("initial"):
        inits["h0"] = normal(rng, dirs, batch, hidden)
        if op == "LSTM":
            inits["c0"] = normal(rng, dirs, batch, hidden)
    ins += ["h0" if opts.get("initial") else ""] + (
        ["c0" if opts.get("initial") else ""] if op == "LSTM" else []
    )
    if opts.get("peepholes"):
        inits["p"] = normal(rng, dirs, 3 * hidden)
        ins.append("p")
    kw = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op == "GRU":
        kw["linear_before_reset"] = opts.get("linear_before_reset", 0)
    outputs = {"y": F, "y_h": F, "y_c": F} if op == "LSTM" else {"y": F, "y_h": F}
    engines = ("ref",) if layout else ("ort",)  # onnxruntime has no batch-major (layout=1) kernels
    check(one(op, ins, feeds, inits=inits, outputs=outputs, opset=14, **kw), feeds, engines=engines)


# ---- transposed convolution ------------------------------------------------------------------

CONV_TRANSPOSES = [
    ((1, 2, 4, 5), (2, 3, 3, 3), {}),
    ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 0, 1]}),
    ((2, 4, 3, 3), (4, 1, 3, 3), {"group": 2, "strides": [2, 2], "output_padding": [1, 0]}),
    ((1, 2, 3, 4), (2, 2, 2, 3), {"dilations": [2, 1], "strides": [1, 2]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 6), (2, 3, 3), {"strides": [2], "pads": [1, 2]}),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_TRANSPOSES)
@pytest.mark.parametrize("const_weight", [True, False])
def test_conv_transpose(rng, x_shape, w_shape, attrs: dict, const_weight: bool) -> None:
    x, w = normal(rng, *x_shape), normal(rng, *w_shape)
    bias = normal(rng, w_shape[1] * attrs.get("group", 1))
    feeds = {"x": x} if const_weight else {"x": x, "w": w}
    inits = {"w": w, "b": bias} if const_weight else {"b": bias}
    check(one("ConvTranspose", ["x", "w", "b"], feeds, inits=inits, **attrs), feeds)


# ---- einsum ----------------------------------------------------------------------------------------

EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(3, 1, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("bii->b", [(2, 3, 3)]),
    ("ij->", [(3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("ij,kj->jik", [(3, 4), (2, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize(("equation", "shapes"), EINSUMS)
def test_einsum(rng, equation: str, shapes) -> None:
    feeds = {f"x{i}": normal(rng, *s) for i, s in enumerate(shapes)}
    # onnxruntime refuses an ellipsis that broadcasts operands of different ranks
    engines = ("ref",) if len({len(s) for s in shapes}) > 1 and "..." in equation else ("ort",)
    check(one("Einsum", list(feeds), feeds, equation=equation), feeds, engines=engines)
