"""Precision modes' speed on glow-cpu: a zoo model compiled in float32 and with
``precision="bf16"`` / ``"fp16"``, beside onnxruntime's float32, one thread.

    python bench/precision_speed.py [resnet50 mobilenetv2 ...] [--runs 7] [--batch 1]
        [--modes bf16 fp16]

Engines are timed round-robin in one process (one run of each in turn, median per engine
after a warm-up), so a load change on a shared machine hits them alike. Also printed: each
mode's relative error against glow's float32 output on the same seeded input (the narrow
kinds keep 8 and 11 significant bits, so this is the accuracy the mode costs, not a bug
check; the tests hold the modes to the reference).
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable, Mapping
from datetime import date

import numpy as np
import onnx
import onnxruntime as ort
from round_robin import median_ms

import glow_core
from glow_core.accuracy import max_relative_error
from glow_core.model_zoo import MODELS, random_inputs

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def _ort(model: onnx.ModelProto) -> Runner:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda x: dict(zip(names, session.run(None, dict(x)), strict=True))


def _glow(model: onnx.ModelProto, precision: str | None) -> Runner:
    fn = glow_core.compile(model, "cpu", options={"threads": 1}, precision=precision)
    return lambda x: fn.run(x)


def measure(name: str, runs: int, batch: int, modes: list[str]) -> None:
    model = MODELS[name](batch=batch)
    engines: dict[str, Runner] = {"glow f32": _glow(model, None)}
    engines.update({f"glow {mode}": _glow(model, mode) for mode in modes})
    engines["ort f32"] = _ort(model)
    x = random_inputs(model, 11)
    reference = engines["glow f32"](x)
    errors = {mode: max_relative_error(engines[f"glow {mode}"](x), reference) for mode in modes}
    ms = median_ms(engines, x, runs)
    cells = [f"{ms[k]:.1f}" for k in engines]
    speedups = [f"{ms['glow f32'] / ms[f'glow {mode}']:.2f}x" for mode in modes]
    errs = [f"{errors[mode]:.2g}" for mode in modes]
    print(f"| {name} | {batch} | {' | '.join(cells + speedups + errs)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet50"])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--modes", nargs="+", default=["bf16", "fp16"], choices=["bf16", "fp16"])
    args = parser.parse_args()
    print(f"{date.today()}, {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}")
    header = ["model", "batch", "glow f32 ms", *(f"glow {m} ms" for m in args.modes), "ort f32 ms"]
    header += [f"{m} speed-up" for m in args.modes] + [f"{m} rel. error vs f32" for m in args.modes]
    print(f"| {' | '.join(header)} |")
    print("|---|--:|" + "--:|" * (len(header) - 2))
    for name in args.models:
        measure(name, args.runs, args.batch, args.modes)


if __name__ == "__main__":
    main()
