"""MobileNetV2 on glow-cpu with the 2026-11-26 GEMM and convolution changes switched off and
on, beside onnxruntime, round-robin in one process (docs/performance.md, "MobileNetV2 on
AVX2 ... edge tiles, B in place, no drop pass").

    .venv/bin/python bench/mobilenetv2_changes.py [--batch 1] [--runs 60]

The changes (``gemm_tile.edge_chains``, ``gemm._few_readers``, ``conv.ROW_GEMM_MIN_WIDTH``)
are read while the code is generated, so "before" is compiled with them switched off and
"after" with them on; both run in this process, turn about with onnxruntime (the load of a
shared machine hits all three alike). The disk cache is off: the two builds differ in code,
not in what the cache keys on.
"""

from __future__ import annotations

import argparse
import contextlib

from round_robin import median_ms


@contextlib.contextmanager
def changes_switched_off():
    """The code generators as they were before the changes, while compiling inside."""
    from glow_cpu.kernels import conv, gemm, gemm_tile

    saved = gemm_tile.edge_chains, gemm._few_readers, conv.ROW_GEMM_MIN_WIDTH
    gemm_tile.edge_chains = lambda count, accumulators: 1
    gemm._few_readers = lambda g, m_panels: False
    conv.ROW_GEMM_MIN_WIDTH = 1 << 62
    try:
        yield
    finally:
        gemm_tile.edge_chains, gemm._few_readers, conv.ROW_GEMM_MIN_WIDTH = saved


def main() -> None:
    import onnxruntime as ort

    import glow_core
    from glow_core.accuracy import relative_error
    from glow_core.model_zoo import MODELS, random_inputs

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    model = MODELS["mobilenetv2"](batch=args.batch)
    inputs = random_inputs(model, seed=0)
    options = {"threads": 1, "cache": False}
    with changes_switched_off():
        before = glow_core.compile(model, backend="cpu", options=options)
    after = glow_core.compile(model, backend="cpu", options=options)
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = session_options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), session_options, providers=["CPUExecutionProvider"]
    )
    expected = session.run(None, inputs)[0]
    for name, compiled in (("before", before), ("after", after)):
        got = next(iter(compiled.run(inputs).values()))
        print(f"{name}: relative error against onnxruntime {relative_error(got, expected):.2e}")
    engines = {
        "before": before.run,
        "after": after.run,
        "ort": lambda feeds: session.run(None, feeds),
    }
    ms = median_ms(engines, inputs, args.runs)
    print(
        f"batch {args.batch}: glow before {ms['before']:.2f} ms ({ms['before'] / ms['ort']:.3f}x), "
        f"after {ms['after']:.2f} ms ({ms['after'] / ms['ort']:.3f}x), onnxruntime {ms['ort']:.2f} ms"
    )


if __name__ == "__main__":
    main()
