"""Accuracy of int8 and fp16/bf16 compiles against the float32 model, on seeded inputs.

    python bench/quantization_accuracy.py [small_cnn resnet50 ...] [--backend cpu] [--modes "bf16,int8 *"]
        [--calibration 8] [--evaluation 8]

For each model: profile on ``--calibration`` seeded batches, then on ``--evaluation`` other seeded
batches compare each mode's logits with the float32 compile's: top-1 agreement, top-5
overlap, cosine similarity, max abs error. An accuracy table, not a timing.
"""

from __future__ import annotations

import argparse
import fnmatch

import numpy as np

import glow_core
from glow_core.model_zoo import MODELS, random_inputs

CALIBRATION, EVALUATION = 8, 8


def compare(reference: list[np.ndarray], other: list[np.ndarray]) -> dict[str, float]:
    ref = np.concatenate([r.reshape(r.shape[0], -1) for r in reference]).astype(np.float64)
    out = np.concatenate([o.reshape(o.shape[0], -1) for o in other]).astype(np.float64)
    top1 = np.mean(ref.argmax(1) == out.argmax(1))
    top5 = np.mean(
        [len(set(np.argsort(-r)[:5]) & set(np.argsort(-o)[:5])) / 5 for r, o in zip(ref, out, strict=True)]
    )
    cos = np.mean(np.sum(ref * out, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1)))
    return {"top1": top1, "top5": top5, "cosine": cos, "max_abs": float(np.abs(ref - out).max())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=["small_cnn"])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument(
        "--modes", default="*", help="comma-separated shell patterns of the mode names to run (default: all)"
    )
    parser.add_argument("--calibration", type=int, default=CALIBRATION, help="profiled batches")
    parser.add_argument("--evaluation", type=int, default=EVALUATION, help="compared batches")
    args = parser.parse_args()
    patterns = args.modes.split(",")
    print("| model | mode | top-1 agreement | top-5 overlap | cosine | max abs err |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        model = MODELS[name]()
        calibration = [random_inputs(model, seed) for seed in range(args.calibration)]
        evaluation = [random_inputs(model, 1000 + seed) for seed in range(args.evaluation)]
        profile = glow_core.profile(model, calibration, args.backend)
        modes: dict[str, object] = {"fp16": "fp16", "bf16": "bf16"}
        for schema in ("asymmetric", "symmetric", "symmetric-uint8", "pow2"):
            modes[f"int8 {schema} per-channel"] = glow_core.Quantize(profile, schema=schema, per_channel=True)
        modes["int8 asymmetric per-tensor"] = glow_core.Quantize(profile)
        modes["int8 asymmetric per-channel kl"] = glow_core.Quantize(
            profile, per_channel=True, calibration="kl"
        )
        modes["int8 asymmetric per-channel percentile"] = glow_core.Quantize(
            profile, per_channel=True, calibration="percentile"
        )
        reference_fn = glow_core.compile(model, args.backend)
        reference = [next(iter(reference_fn.run(x).values())) for x in evaluation]
        for mode, precision in modes.items():
            if not any(fnmatch.fnmatchcase(mode, pattern) for pattern in patterns):
                continue
            fn = glow_core.compile(model, args.backend, precision=precision)
            got = [next(iter(fn.run(x).values())) for x in evaluation]
            s = compare(reference, got)
            figures = f"{s['top1']:.3f} | {s['top5']:.3f} | {s['cosine']:.5f} | {s['max_abs']:.3g}"
            print(f"| {name} | {mode} | {figures} |", flush=True)


if __name__ == "__main__":
    main()
