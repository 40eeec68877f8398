"""Single ResNet/MobileNet/VGG convolution layers (Conv + bias + ReLU), glow-cpu vs onnxruntime.

Kernel-level figures behind docs/performance.md: GFLOP/s of each engine on one layer, best
of N runs (the minimum resists a busy shared machine better than the median), timed
alternately in one process.

    .venv/bin/python bench/bench_layers.py [--threads 1] [--runs 30] [--cold]

With ``--cold`` every timed run starts with the caches flushed (a 96 MiB buffer written,
untimed, before it): the weights and the input come from memory, as they do inside a whole
model whose weights outgrow the L3; without it they stay in cache from the previous run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

# (batch, channels, height, width, out channels, kernel, stride, pad, group)
LAYERS = [
    (1, 576, 56, 56, 64, 1, 1, 0, 1),
    (1, 64, 56, 56, 64, 1, 1, 0, 1),
    (1, 64, 56, 56, 256, 1, 1, 0, 1),
    (1, 64, 56, 56, 64, 3, 1, 1, 1),
    (1, 128, 28, 28, 128, 3, 1, 1, 1),
    (1, 256, 14, 14, 256, 3, 1, 1, 1),
    (1, 512, 7, 7, 512, 3, 1, 1, 1),
    (1, 1024, 14, 14, 256, 1, 1, 0, 1),
    (1, 128, 28, 28, 128, 3, 2, 1, 1),
    (1, 256, 56, 56, 512, 1, 2, 0, 1),
    (1, 3, 224, 224, 64, 7, 2, 3, 1),
    (1, 192, 28, 28, 192, 3, 1, 1, 192),
    # VGG-19
    (1, 3, 224, 224, 64, 3, 1, 1, 1),
    (1, 64, 224, 224, 64, 3, 1, 1, 1),
    (1, 128, 112, 112, 128, 3, 1, 1, 1),
    (1, 256, 56, 56, 256, 3, 1, 1, 1),
    (1, 512, 28, 28, 512, 3, 1, 1, 1),
    (1, 512, 14, 14, 512, 3, 1, 1, 1),
]


def conv_layer(n, c, h, w, cout, k, s, pad, group):
    """An ONNX Conv + Relu model and its FLOP count."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((cout, c // group, k, k)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4, group=group
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, cout, oh, ow])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, 2 * n * cout * (c // group) * k * k * oh * ow


EVICT_BYTES = 96 << 20  # three times this machine's 32 MiB L3


def _best(fn, runs: int, evict: np.ndarray | None = None) -> float:
    fn()
    times = []
    for _ in range(runs):
        if evict is not None:
            evict += 1  # every line of a buffer larger than the caches, written
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    import onnxruntime as ort

    import glow_core

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--cold", action="store_true", help="flush the caches before every timed run")
    parser.add_argument("--only", type=int, nargs="*", help="indices into LAYERS to run (default: all)")
    args = parser.parse_args()
    evict = np.zeros(EVICT_BYTES // 4, dtype=np.float32) if args.cold else None
    print("| layer (n, c, h, w, cout, k, s, pad, group) | glow ms | GFLOP/s | ort ms | GFLOP/s | glow/ort |")
    print("|---|--:|--:|--:|--:|--:|")
    for index, layer in enumerate(LAYERS):
        if args.only and index not in args.only:
            continue
        model, flops = conv_layer(*layer)
        x = np.random.default_rng(1).standard_normal(layer[:4]).astype(np.float32)
        compiled = glow_core.compile(model, backend="cpu", options={"threads": args.threads})
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        glow_s = _best(lambda: compiled.run({"x": x}), args.runs, evict)  # noqa: B023 - called at once
        ort_s = _best(lambda: session.run(None, {"x": x}), args.runs, evict)  # noqa: B023
        print(
            f"| {layer} | {glow_s * 1e3:.3f} | {flops / glow_s / 1e9:.1f} | {ort_s * 1e3:.3f} | "
            f"{flops / ort_s / 1e9:.1f} | {glow_s / ort_s:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
