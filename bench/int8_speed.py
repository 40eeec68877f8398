"""int8 speed on glow-cpu: a model quantized by onnxruntime (QDQ), run by glow-cpu on its int8
kernels and by onnxruntime, beside the float32 model on both; one thread.

    python bench/int8_speed.py [resnet50 mobilenetv2 ...] [--runs 7] [--calibration 4] [--batch 1]
                               [--cpu-option KEY=VALUE ...]

``--cpu-option`` (repeatable, VALUE as JSON or a bare word) applies to both glow compiles:
``--cpu-option int8_dot=pairs`` against the default ``auto`` compares the int16-pair kernels
with the VNNI byte quads on a CPU that has them (docs/quantization.md).

The QDQ model comes from ``onnxruntime.quantization.quantize_static`` (per-channel int8
weights, int8 activations) with seeded calibration batches. Engines are timed round-robin
in one process (one run of each in turn, median per engine after a warm-up), so a load
change on a shared machine hits them alike. Also printed: how far glow's output is from
onnxruntime's on the same QDQ model, in steps of the output's quantization scale.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from glow_conformance.quantized_models import onnxruntime_qdq, output_step
from round_robin import median_ms

import glow_core
from glow_core.commands.arguments import parse_options
from glow_core.model_zoo import MODELS, random_inputs


def quantize_qdq(model: onnx.ModelProto, calibration: int, directory: str) -> onnx.ModelProto:
    """onnxruntime's static QDQ quantization of ``model`` (per-channel int8 weights, int8
    activations, ``calibration`` seeded batches), after its recommended pre-processing (which
    folds BatchNorm into the convolutions on onnxruntime 1.32; 1.30 leaves them, see
    docs/quantization.md): the conformance suite's recipe, so the tests and the tables agree."""
    return onnxruntime_qdq(model, Path(directory), calibration)


def _ort(model: onnx.ModelProto):
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, x)[0]


def _glow(model: onnx.ModelProto, cpu_options: dict[str, object]):
    fn = glow_core.compile(model, "cpu", options={"threads": 1, **cpu_options})
    return lambda x: next(iter(fn.run(x).values()))


def measure(
    name: str,
    runs: int,
    calibration: int,
    keep: str | None,
    batch: int = 1,
    cpu_options: dict[str, object] | None = None,
) -> None:
    model = MODELS[name](batch=batch)
    kept = os.path.join(keep, f"{name}_b{batch}_qdq_{calibration}.onnx") if keep else None
    if kept and os.path.exists(kept):
        qdq = onnx.load(kept)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            qdq = quantize_qdq(model, calibration, tmp)
        if kept:
            onnx.save(qdq, kept)
    engines = {
        "glow f32": _glow(model, cpu_options or {}),
        "glow int8": _glow(qdq, cpu_options or {}),
        "ort f32": _ort(model),
        "ort int8": _ort(qdq),
    }
    x = random_inputs(model, 7)
    got, ref = engines["glow int8"](x), engines["ort int8"](x)
    step = output_step(qdq)
    diff = float(np.abs(got.astype(np.float64) - ref).max())
    ms = median_ms(engines, x, runs)
    steps = f"{diff / step:.2f} steps of {step:.4g}" if step else f"{diff:.4g} (abs)"
    cells = [f"{ms[k]:.1f}" for k in engines]
    ratios = f"{ms['glow f32'] / ms['glow int8']:.2f}x | {ms['glow int8'] / ms['ort int8']:.2f}"
    print(f"| {name} | {batch} | {' | '.join(cells)} | {ratios} | {steps} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet50", "mobilenetv2"])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calibration", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="images per run (the calibration batches too)")
    parser.add_argument("--keep", help="keep the QDQ models in this directory (and reuse them)")
    parser.add_argument(
        "--cpu-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a glow-cpu option for both glow compiles (VALUE as JSON or a word: int8_dot=pairs)",
    )
    args = parser.parse_args()
    cpu_options = parse_options(args.cpu_option)
    machine = platform.processor() or platform.machine()
    load = os.getloadavg()[0]
    print(f"{date.today()}, {machine}, load {load:.1f}, glow-cpu options {cpu_options or 'default'}")
    header = ["model", "batch", "glow f32 ms", "glow int8 ms", "ort f32 ms", "ort int8 ms"]
    header += ["glow int8 speed-up", "glow/ort int8", "max diff vs ort"]
    print(f"| {' | '.join(header)} |")
    print("|---|--:|---|---|---|---|---|---|---|")
    for name in args.models:
        measure(name, args.runs, args.calibration, args.keep, args.batch, cpu_options)


if __name__ == "__main__":
    main()
