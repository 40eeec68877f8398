"""Batch inference over Ray Data: a glow bundle per actor against onnxruntime in the same actors.

    .venv/bin/python bench/ray_bundle.py [--model resnet50] [--images 200] [--actors 2]
                                         [--batch-size 8] [--dir bundle_figures]

Starts a local Ray instance with ``--actors`` CPUs, makes a dataset of ``--images`` seeded
random images (with an ``id`` column), and maps it twice with ``concurrency=actors``
actors of one CPU each: with ``GlowPredictor`` (the bundle DIR/MODEL, written first when
missing: file weights, shared library, one thread) and with an onnxruntime session on one
thread (the same model, saved next to the bundle). Both run one image a call (the zoo model's
batch). Each actor times its own calls, so the figure per actor is rows over seconds spent
computing, without Ray's start-up and scheduling; the wall time of each whole pass is printed
too. Every glow row is compared with onnxruntime's (maximum relative error) and with the same
bundle run in this process (bit for bit).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

import glow_core
from glow_core.accuracy import relative_error
from glow_core.integrations.ray_data import GlowPredictor, require_ray
from glow_core.model_zoo import MODELS


class TimedGlow(GlowPredictor):
    """GlowPredictor that reports, per batch, its actor's pid and the seconds it computed."""

    def __call__(self, batch):
        start = time.perf_counter()
        out = super().__call__(batch)
        return _timed(out, start)


class TimedOnnxRuntime:
    """An onnxruntime session on one thread, one row a call (as the bundle runs), timed."""

    def __init__(self, model_path: str, input_name: str, output_name: str):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        self.input_name, self.output_name = input_name, output_name

    def __call__(self, batch):
        start = time.perf_counter()
        rows = [
            self.session.run([self.output_name], {self.input_name: row[None]})[0][0] for row in batch["input"]
        ]
        return _timed({"output": np.stack(rows), "id": batch["id"]}, start)


def _timed(out: dict, start: float) -> dict:
    rows = len(out["id"])
    out["pid"] = np.full(rows, os.getpid())
    out["seconds"] = np.full(rows, (time.perf_counter() - start) / max(rows, 1))
    return out


def per_actor(rows: list[dict]) -> dict[int, float]:
    """Rows per second of compute, per actor (by pid)."""
    count, busy = defaultdict(int), defaultdict(float)
    for row in rows:
        count[row["pid"]] += 1
        busy[row["pid"]] += row["seconds"]
    return {pid: count[pid] / busy[pid] for pid in count}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=Path("bundle_figures"))
    args = parser.parse_args()
    ray = require_ray()
    model = MODELS[args.model]()
    directory = (args.dir / args.model).resolve()
    if not (directory / f"{args.model}.json").exists():
        glow_core.bundle(model, directory, name=args.model, shared=True)
    onnx_path = directory / f"{args.model}.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    entry = glow_core.load_bundle(directory).manifest.entries[0]
    (input_slot,), (output_slot,) = entry.inputs, entry.outputs
    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.images, *input_slot.shape[1:]), dtype=np.float32)

    ray.init(num_cpus=args.actors, include_dashboard=False, log_to_driver=False, configure_logging=False)
    items = [{"id": i, "input": image} for i, image in enumerate(images)]
    passes = {
        "glow bundle": (
            TimedGlow,
            {"columns": {input_slot.name: "input"}, "keep_columns": ["id"]},
            (directory,),
        ),
        "onnxruntime": (TimedOnnxRuntime, {}, (str(onnx_path), input_slot.name, output_slot.name)),
    }
    results = {}
    for what, (cls, kwargs, positional) in passes.items():
        kwargs = {**kwargs, "output_columns": {output_slot.name: "output"}} if cls is TimedGlow else kwargs
        ds = ray.data.from_items(items)
        start = time.perf_counter()
        rows = ds.map_batches(
            cls,
            fn_constructor_args=positional,
            fn_constructor_kwargs=kwargs,
            concurrency=args.actors,
            batch_size=args.batch_size,
            batch_format="numpy",
            num_cpus=1,
        ).take_all()
        wall = time.perf_counter() - start
        rates = per_actor(rows)
        results[what] = {row["id"]: row["output"] for row in rows}
        print(
            f"{what}: {len(rows)} images, wall {wall:.1f} s (start-up included); per actor "
            + ", ".join(f"{rate:.2f} img/s" for rate in sorted(rates.values()))
            + f"; mean {np.mean(list(rates.values())):.2f} img/s per actor"
        )
    ray.shutdown()
    glow, ort = results["glow bundle"], results["onnxruntime"]
    error = max(relative_error(glow[i], ort[i]) for i in range(args.images))
    local = glow_core.load_bundle(directory)[entry.name]
    same = all(
        np.array_equal(glow[i], local.run({input_slot.name: images[i][None]})[output_slot.name][0])
        for i in range(0, args.images, max(1, args.images // 20))
    )
    print(f"glow vs onnxruntime: max relative error {error:.2e}; glow rows equal to one-process runs: {same}")
    if error >= 1e-4 or not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
