"""Independent float64 implementations of the layer nodes (LSTM, GRU, RNN, ConvTranspose),
written from the ONNX operator definitions step by step, sharing no code with their
lowerings; Resize is onnx.reference's and Einsum numpy's, run on float64 data."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

_DEFAULT_ACTIVATIONS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}
_PARAMS = {
    "affine": (1.0, 0.0),
    "leakyrelu": (0.01, 0.0),
    "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5),
}


def _function(name: str, alpha: float | None, beta: float | None) -> Callable[[np.ndarray], np.ndarray]:
    key = name.lower()
    a, b = _PARAMS.get(key, (0.0, 0.0))
    a = a if alpha is None else alpha
    b = b if beta is None else beta
    return {
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, 0.0),
        "affine": lambda x: a * x + b,
        "leakyrelu": lambda x: np.where(x >= 0, x, a * x),
        "scaledtanh": lambda x: a * np.tanh(b * x),
        "hardsigmoid": lambda x: np.clip(a * x + b, 0.0, 1.0),
        "softsign": lambda x: x / (1.0 + np.abs(x)),
        "softplus": lambda x: np.log1p(np.exp(x)),
    }[key]


def _functions(op: str, dirs: int, attrs: dict[str, Any]) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
    names = list(attrs["activations"]) or _DEFAULT_ACTIVATIONS[op] * dirs
    alphas, betas = attrs["activation_alpha"], attrs["activation_beta"]
    fs = [
        _function(n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
        for i, n in enumerate(names)
    ]
    per = len(_DEFAULT_ACTIVATIONS[op])
    return [fs[d * per : (d + 1) * per] for d in range(dirs)]


def _cell_step(op, x, h, c, w, r, wb, rb, p, fs, clip, attrs):
    """One ONNX cell update for one batch row: the new (h, c)."""
    hidden = h.shape[0]
    cl = (lambda v: np.clip(v, -clip, clip)) if np.isfinite(clip) else (lambda v: v)
    if op == "RNN":
        return fs[0](cl(w @ x + r @ h + wb + rb)), None
    if op == "GRU":
        wz, wr, wh = np.split(w, 3)
        rz, rr, rh = np.split(r, 3)
        wbz, wbr, wbh = np.split(wb, 3)
        rbz, rbr, rbh = np.split(rb, 3)
        z = fs[0](cl(wz @ x + rz @ h + wbz + rbz))
        reset = fs[0](cl(wr @ x + rr @ h + wbr + rbr))
        if attrs["linear_before_reset"]:
            candidate = fs[1](cl(wh @ x + reset * (rh @ h + rbh) + wbh))
        else:
            candidate = fs[1](cl(wh @ x + rh @ (reset * h) + rbh + wbh))
        return (1 - z) * candidate + z * h, None
    gates = w @ x + r @ h + wb + rb
    gi, go, gf, gc = (gates[k * hidden : (k + 1) * hidden] for k in range(4))
    pi, po, pf = p[:hidden], p[hidden : 2 * hidden], p[2 * hidden :]
    i = fs[0](cl(gi + pi * c))
    f = 1 - i if attrs["input_forget"] else fs[0](cl(gf + pf * c))
    c_new = f * c + i * fs[1](cl(gc))
    o = fs[0](cl(go + po * c_new))
    return o * fs[2](c_new), c_new


def recurrent(op: str, *operands: np.ndarray, **attrs: Any) -> np.ndarray:
    """The packed result (Y, then the final states along the sequence axis) of an ONNX
    LSTM, GRU or RNN, one batch row and one time step at a time."""
    names = ["x", "w", "r", "b", "lens", "h0", "c0", "p"][: len(operands)]
    v = dict(zip(names, operands, strict=True))
    layout = attrs["layout"]
    x = v["x"] if layout == 0 else v["x"].transpose(1, 0, 2)
    states = [v.get("h0"), v.get("c0")]
    states = [s if s is None or layout == 0 else s.transpose(1, 0, 2) for s in states]
    seq, batch, _ = x.shape
    dirs, gh, hidden = v["r"].shape
    y = np.zeros((seq, dirs, batch, hidden))
    final_h, final_c = np.zeros((dirs, batch, hidden)), np.zeros((dirs, batch, hidden))
    lengths = v["lens"].astype(np.int64)
    for d, fs in enumerate(_functions(op, dirs, attrs)):
        backward = attrs["direction"] == "reverse" or d == 1
        wb, rb = v["b"][d][:gh], v["b"][d][gh:]
        p = v["p"][d] if op == "LSTM" else None
        for n in range(batch):
            h = states[0][d, n].copy()
            c = states[1][d, n].copy() if op == "LSTM" else None
            steps = range(lengths[n] - 1, -1, -1) if backward else range(lengths[n])
            for t in steps:
                h, c = _cell_step(
                    op, x[t, n], h, c, v["w"][d], v["r"][d], wb, rb, p, fs, attrs["clip"], attrs
                )
                y[t, d, n] = h
            final_h[d, n] = h
            if c is not None:
                final_c[d, n] = c
    extra = [final_h[None], final_c[None]] if op == "LSTM" else [final_h[None]]
    packed = np.concatenate([y, *extra], axis=0)
    return packed if layout == 0 else packed.transpose(2, 0, 1, 3)


def conv_transpose(x, w, bias, strides, pads, dilations, output_padding, group) -> np.ndarray:
    """ONNX ConvTranspose by its definition: every input element scatters input * filter
    into the outputs at i * stride + k * dilation - pad begin."""
    n, channels, *size = x.shape
    _, per_group, *kernel = w.shape
    d = len(size)
    out = [
        s * (i - 1) + e + dl * (k - 1) + 1 - pads[a] - pads[d + a]
        for a, (i, k, s, dl, e) in enumerate(
            zip(size, kernel, strides, dilations, output_padding, strict=True)
        )
    ]
    y = np.zeros((n, per_group * group, *out))
    cin = channels // group
    for index in itertools.product(*(range(i) for i in size)):
        for tap in itertools.product(*(range(k) for k in kernel)):
            o = [
                i * s + k * dl - p
                for i, k, s, dl, p in zip(index, tap, strides, dilations, pads, strict=False)
            ]
            if not all(0 <= v < limit for v, limit in zip(o, out, strict=True)):
                continue
            for g in range(group):
                xs = x[(slice(None), slice(g * cin, (g + 1) * cin), *index)]  # [n, cin]
                ws = w[(slice(g * cin, (g + 1) * cin), slice(None), *tap)]  # [cin, per_group]
                y[(slice(None), slice(g * per_group, (g + 1) * per_group), *o)] += xs @ ws
    return y + bias.reshape(1, -1, *([1] * d))


def resize(x: np.ndarray, sizes, scales, roi, **attrs: Any) -> np.ndarray:
    """onnx.reference's Resize-19 on float64 data, given the node's scales and roi (its
    sizes must be what ONNX derives from them)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], **attrs)
    inits = [
        numpy_helper.from_array(np.asarray(roi, np.float32), "roi"),
        numpy_helper.from_array(np.asarray(scales, np.float32), "scales"),
    ]
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert y.shape == tuple(sizes), (y.shape, sizes)
    return y


LAYER_ORACLES: dict[str, Callable[..., np.ndarray]] = {
    "LSTM": lambda *operands, **attrs: recurrent("LSTM", *operands, **attrs),
    "GRU": lambda *operands, **attrs: recurrent("GRU", *operands, **attrs),
    "RNN": lambda *operands, **attrs: recurrent("RNN", *operands, **attrs),
    "ConvTranspose": conv_transpose,
    "Resize": resize,
    "Einsum": lambda operands, equation: np.einsum(equation, *operands),
}
"""Layer node kind -> its float64 oracle, called with the operands and completed attributes."""
