"""Dense layers whose A outgrows L2 run their row panels over groups of column panels
(``gemm._streams_a``): measured on single MatMul + bias layers and on a whole zoo model,
each with the switch off ("before") and on ("after"), beside onnxruntime round-robin in one
process (shuffled order, the calling thread's CPU time, one thread).

    .venv/bin/python bench/dense_groups_ab.py layers [--runs 60] [--shapes 1024x1024x256 ...]
    .venv/bin/python bench/dense_groups_ab.py model [--model bert_mini] [--batch 8] [--runs 40]

A layer ``MxKxN`` is ``x[M, K] @ W[K, N] + b`` with a constant ``W`` (a transformer's dense
layer over M tokens). Both builds' outputs are checked against onnxruntime's.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

import numpy as np
from model_ab import ort_session, whole_model
from round_robin import median_ms

DEFAULT_SHAPES = ("1024x1024x256", "1024x256x1024", "1024x256x256", "128x1024x256", "128x256x1024")


@contextlib.contextmanager
def groups_off() -> Iterator[None]:
    """Compile as before the change: one column panel at a time whatever A's size."""
    from glow_cpu.kernels import gemm

    saved = gemm._streams_a
    gemm._streams_a = lambda g: False
    try:
        yield
    finally:
        gemm._streams_a = saved


def dense_model(m: int, k: int, n: int, seed: int):
    """``x[m, k] @ W[k, n] + b`` with seeded random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Add", ["y", "B"], ["out"])]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [m, n])],
        [weight, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def layers(shapes: list[str], runs: int) -> None:
    import glow_core
    from glow_core.accuracy import relative_error

    options = {"threads": 1, "cache": False}
    print("| layer M x K x N | glow before ms | glow after ms | ort ms | before/ort | after/ort |", end="")
    print(" after/before |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for index, text in enumerate(shapes):
        m, k, n = (int(d) for d in text.split("x"))
        model = dense_model(m, k, n, seed=index)
        with groups_off():
            before = glow_core.compile(model, backend="cpu", options=options)
        after = glow_core.compile(model, backend="cpu", options=options)
        session = ort_session(model)
        feeds = {"x": np.random.default_rng(100 + index).standard_normal((m, k)).astype(np.float32)}
        expected = session.run(None, feeds)[0]
        for build in (before, after):
            error = relative_error(next(iter(build.run(feeds).values())), expected)
            assert error < 1e-4, f"{text}: relative error {error:.2e} against onnxruntime"
        engines = {"before": before.run, "after": after.run, "ort": lambda f, s=session: s.run(None, f)}
        ms = median_ms(engines, feeds, runs, time.thread_time)
        print(
            f"| {text} | {ms['before']:.3f} | {ms['after']:.3f} | {ms['ort']:.3f} | "
            f"{ms['before'] / ms['ort']:.3f} | {ms['after'] / ms['ort']:.3f} | "
            f"{ms['after'] / ms['before']:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("layers", "model"))
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES))
    parser.add_argument("--model", default="bert_mini")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    if args.what == "layers":
        layers(args.shapes, args.runs)
    else:
        dense = ("the dense layers (glow's MatMul instructions)", lambda name: name.endswith("/matmul"))
        whole_model(args.batch, args.runs, groups_off, lambda model: set(), "", args.model, True, dense)


if __name__ == "__main__":
    main()
