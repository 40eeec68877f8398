"""Where an int8 QDQ model's time goes on glow-cpu: the per-instruction profile of
onnxruntime's QDQ model (as ``bench/int8_speed.py`` builds it), summed per kind, with the
share of the int8 layers against the float glue between them. ``--ort`` adds onnxruntime's
own per-node profile of the same QDQ model (one thread), to set layer against layer.

    python bench/int8_profile.py resnet50 [--runs 5] [--calibration 2] [--keep DIR] [--top 15] [--ort]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile

import onnx
from glow_cpu.runtime import _profile_table
from int8_speed import quantize_qdq  # this folder's QDQ recipe, shared with the speed table

import glow_core
from glow_core.model_zoo import MODELS, random_inputs


def qdq_model(name: str, batch: int, calibration: int, keep: str | None) -> onnx.ModelProto:
    model = MODELS[name](batch=batch)
    kept = os.path.join(keep, f"{name}_b{batch}_qdq_{calibration}.onnx") if keep else None
    if kept and os.path.exists(kept):
        return onnx.load(kept)
    with tempfile.TemporaryDirectory() as tmp:
        qdq = quantize_qdq(model, calibration, tmp)
    if kept:
        onnx.save(qdq, kept)
    return qdq


def ort_profile(qdq: onnx.ModelProto, inputs: dict, runs: int, top: int) -> str:
    """onnxruntime's per-node times (``SessionOptions.enable_profiling``, one thread) of
    ``qdq``, mean over ``runs`` after a warm-up: a table per operator type and the ``top``
    nodes, as markdown."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(qdq.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, inputs)  # warm-up, dropped below
        for _ in range(runs):
            session.run(None, inputs)
        with open(session.end_profiling()) as f:
            events = [
                e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
            ]
    per_node: dict[str, float] = collections.defaultdict(float)
    per_op: dict[str, float] = collections.defaultdict(float)
    ops = {}
    counted = events[len(events) // (runs + 1) :]  # the warm-up run's events come first
    for event in counted:
        name, op = event["name"][: -len("_kernel_time")], event["args"]["op_name"]
        per_node[name] += event["dur"] / 1e3 / runs
        per_op[op] += event["dur"] / 1e3 / runs
        ops[name] = op
    total = sum(per_op.values())
    lines = [
        f"onnxruntime {ort.__version__}: {total:.1f} ms in nodes",
        "",
        "| op | ms | share |",
        "|---|--:|--:|",
    ]
    lines += [
        f"| {op} | {ms:.3f} | {ms / total:.1%} |" for op, ms in sorted(per_op.items(), key=lambda kv: -kv[1])
    ]
    lines += ["", "| node | op | ms | share |", "|---|---|--:|--:|"]
    ranked = sorted(per_node.items(), key=lambda kv: -kv[1])[:top]
    lines += [f"| {name} | {ops[name]} | {ms:.3f} | {ms / total:.1%} |" for name, ms in ranked]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet50"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calibration", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--keep", help="keep the QDQ models in this directory (and reuse them)")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--ort", action="store_true", help="also onnxruntime's per-node profile")
    args = parser.parse_args()
    for name in args.models:
        qdq = qdq_model(name, args.batch, args.calibration, args.keep)
        fn = glow_core.compile(qdq, "cpu", options={"threads": 1, "profile": True})
        x = fn.check_inputs(random_inputs(MODELS[name](batch=args.batch), 7))
        rows = fn.median_profile(x, args.runs)
        total = sum(r.seconds for r in rows)
        print(f"## {name} (batch {args.batch}): {total * 1e3:.1f} ms profiled")
        print(_profile_table(rows, args.top))
        if args.ort:
            print()
            print(ort_profile(qdq, random_inputs(MODELS[name](batch=args.batch), 7), args.runs, args.top))


if __name__ == "__main__":
    main()
