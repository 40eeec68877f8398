"""Where an int8 QDQ model's time goes on glow-cpu: the per-instruction profile of
onnxruntime's QDQ model (as ``bench/int8_speed.py`` builds it), summed per kind, with the
share of the int8 layers against the float glue between them.

    python bench/int8_profile.py resnet50 [--runs 5] [--calibration 2] [--keep DIR] [--top 15]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet50"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calibration", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--keep", help="keep the QDQ models in this directory (and reuse them)")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    for name in args.models:
        qdq = qdq_model(name, args.batch, args.calibration, args.keep)
        fn = glow_core.compile(qdq, "cpu", options={"threads": 1, "profile": True})
        x = fn.check_inputs(random_inputs(MODELS[name](batch=args.batch), 7))
        rows = fn.median_profile(x, args.runs)
        total = sum(r.seconds for r in rows)
        print(f"## {name} (batch {args.batch}): {total * 1e3:.1f} ms profiled")
        print(_profile_table(rows, args.top))


if __name__ == "__main__":
    main()
