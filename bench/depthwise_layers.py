"""MobileNetV2's depthwise layers one at a time on glow-cpu, its depthwise kernel switches off
("before") and on ("after"), beside onnxruntime, round-robin in one process
(docs/performance.md, "MobileNetV2 on AVX2 ... depthwise layers").

    .venv/bin/python bench/depthwise_layers.py [--batch 1] [--runs 200]

Each layer is a Conv (group = channels, 3x3, pad 1) with bias and Clip(0, 6), as in the model.
The switches are read while the code is generated, so "before" is compiled with them off; the
disk cache is off (the builds differ in code, not in what the cache keys on).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "backends", "glow_cpu", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import model_ab
from round_robin import median_ms

# (channels, input size, stride): one of each kind of MobileNetV2's depthwise layers
LAYERS = [
    (32, 112, 1),
    (96, 112, 2),
    (144, 56, 1),
    (144, 56, 2),
    (192, 28, 1),
    (192, 28, 2),
    (384, 14, 1),
    (576, 14, 1),
    (576, 14, 2),
    (960, 7, 1),
]


@contextlib.contextmanager
def switched_off():
    """The depthwise kernels as they were before, while compiling inside."""
    from glow_cpu.kernels import depthwise

    saved = depthwise.FLAT_PLANES, depthwise.STRIDE2_CARRY, depthwise.STRIDE2_PAIRS
    depthwise.FLAT_PLANES = depthwise.STRIDE2_CARRY = depthwise.STRIDE2_PAIRS = False
    try:
        yield
    finally:
        depthwise.FLAT_PLANES, depthwise.STRIDE2_CARRY, depthwise.STRIDE2_PAIRS = saved


def _ort_run(session):
    return lambda feeds: session.run(None, feeds)


def whole_model(batch: int, runs: int) -> None:
    """MobileNetV2 before and after beside onnxruntime, round-robin; then the depthwise
    instructions' per-instruction profile medians, before and after, with onnxruntime's."""
    model_ab.whole_model(
        batch, runs, switched_off, lambda model: model_ab.grouped_convs(model, True), "depthwise instructions"
    )


def main() -> None:
    import onnxruntime as ort
    from cpu_cases import conv_model

    import glow_core
    from glow_core.accuracy import relative_error

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="*", help="only the layers of these input sizes")
    parser.add_argument("--model", action="store_true", help="the whole model and its depthwise instructions")
    args = parser.parse_args()
    options = {"threads": 1, "cache": False}
    if args.model:
        whole_model(args.batch, args.runs)
        return
    print("| channels | size | stride | glow before ms | glow after ms | ort ms | before/ort | after/ort |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for c, size, stride in LAYERS:
        if args.sizes and size not in args.sizes:
            continue
        model, feeds, output = conv_model((args.batch, c, size, size, c, 3, stride, 1, c), "bias_clip", c)
        with switched_off():
            before = glow_core.compile(model, backend="cpu", options=options)
        after = glow_core.compile(model, backend="cpu", options=options)
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = session_options.inter_op_num_threads = 1
        session = ort.InferenceSession(
            model.SerializeToString(), session_options, providers=["CPUExecutionProvider"]
        )
        expected = session.run(None, feeds)[0]
        for compiled in (before, after):
            assert relative_error(compiled.run(feeds)[output], expected) < 1e-5
        engines = {"before": before.run, "after": after.run, "ort": _ort_run(session)}
        ms = median_ms(engines, feeds, args.runs)
        print(
            f"| {c} | {size} | {stride} | {ms['before']:.4f} | {ms['after']:.4f} | {ms['ort']:.4f} "
            f"| {ms['before'] / ms['ort']:.2f} | {ms['after'] / ms['ort']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
