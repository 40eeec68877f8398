"""glow-cpu and glow-opencl against onnxruntime and OpenVINO, side by side in one run: latency,
compile time, peak memory.

Latency: glow-cpu, onnxruntime and OpenVINO in one child process, timed alternately in blocks
of runs (so load from neighbours on a shared machine hits all alike), medians after warm-up,
and the ratio glow / onnxruntime (below 1: glow is faster). glow-opencl runs in a child of its
own and its ratio is opencl / glow-cpu alone: in the alternating child PoCL (the CPU device)
slowed the runs of the engine timed after it, glow-cpu's ResNet-50 at batch 8 by a quarter
(869 ms there, 698 without opencl in the process, 714 alone; docs/performance.md). Compile time and peak
resident memory (``VmHWM``, its mark reset once the child has built the model and inputs):
each engine alone in a fresh child process, so one engine's allocations never count for the
other; those children also time their engine alone (the "alone" column: with several
threads, onnxruntime's pool spins for a while after each of its runs and takes a core from
the engine timed next, so the alternating figure penalizes whichever runs after it). The
alone column is the median of ``--alone-rounds`` pairs of children, the order swapped each
round, and of their ratios: a single pair, minutes apart, measured the machine's speed as
much as the engines'. Same batch, same inputs, same thread count (PoCL's CPU device is
capped with its ``POCL_MAX_PTHREAD_COUNT``; a GPU has no such knob). Without a
working OpenCL device the opencl columns are skipped with a printed note. OpenVINO (the
``bench`` extra: ``pip install -e .[bench]``) runs its CPU plugin in float32
(``INFERENCE_PRECISION_HINT=f32``: it would otherwise pick bf16 on CPUs that have it), one
stream, ``INFERENCE_NUM_THREADS`` = threads; without it installed its columns are skipped.

    .venv/bin/python bench/bench_models.py                  # the full table (minutes)
    .venv/bin/python bench/bench_models.py --models mlp --threads 1 --batches 1
    .venv/bin/python bench/bench_models.py --profile resnet50   # per-instruction times
    .venv/bin/python bench/bench_models.py --profile resnet50 --backend opencl  # per kernel

Compile time is reported cold (empty object cache) and warm (the same function compiled
again in a new process: the object code comes from the cache).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date

import numpy as np

DEFAULT_MODELS = ("resnet50", "vgg19", "inception_v3", "mobilenetv2", "transformer_encoder", "bert_mini")
SLOW_BATCH = {"resnet50": 8}  # fewer repetitions where one run takes a second


def _median_ms(fn, warmup: int, runs: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


CPU_OPTIONS_ENV = "GLOW_BENCH_CPU_OPTIONS"
"""Extra glow-cpu options (JSON) the children compile with: ``--cpu-option winograd=false``."""


def _glow(model, threads: int, profile: bool = False):
    import glow_core

    start = time.perf_counter()
    options = {"threads": threads, "profile": profile, **json.loads(os.environ.get(CPU_OPTIONS_ENV, "{}"))}
    compiled = glow_core.compile(model, backend="cpu", options=options)
    return compiled, time.perf_counter() - start


def _ort(model, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    start = time.perf_counter()
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session, time.perf_counter() - start


def _openvino(model, threads: int):
    """An OpenVINO CPU infer request for ``model``, float32, one stream, ``threads`` threads."""
    import openvino as ov

    core = ov.Core()
    config = {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:  # read_model takes a file; the bytes stay ours
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as file:
            file.write(model.SerializeToString())
        compiled = core.compile_model(core.read_model(path), "CPU", config)
    request = compiled.create_infer_request()
    return request, time.perf_counter() - start


def openvino_version() -> str | None:
    """OpenVINO's version, or None (after printing why) when it is not installed."""
    try:
        import openvino
    except ImportError:
        print("note: no OpenVINO columns: openvino is not installed (pip install -e .[bench])")
        return None
    return openvino.__version__


def _opencl(model):
    import glow_core

    start = time.perf_counter()
    compiled = glow_core.compile(model, backend="opencl")
    return compiled, time.perf_counter() - start


def opencl_device() -> str | None:
    """The OpenCL device glow-opencl would use, or None (after printing why) when there is none."""
    try:
        from glow_opencl.runtime import select_device
    except Exception as err:  # the plugin or pyopencl is not installed
        print(f"note: no opencl columns: glow-opencl is not importable ({err})")
        return None
    try:
        return select_device().ref.label
    except Exception as err:
        print(f"note: no opencl columns: {err}")
        return None


def worker(engine: str, model_name: str, batch: int, threads: int, runs: int, profile: bool) -> dict:
    """One measurement in this (child) process; returns the figures as a dict.

    ``side`` (and ``side+ov``) time the engines alternately, block by block, so a
    neighbour's load on this shared machine hits all alike; ``glow`` and ``ort`` alone give
    compile time and peak RSS; ``opencl`` gives the OpenCL compile time and latency alone, or
    with ``profile`` its per-kernel table.
    """
    from glow_core.commands.measure import PeakMemory
    from glow_core.heap import trim_heap
    from glow_core.model_zoo import MODELS, random_inputs

    model = MODELS[model_name](batch=batch)
    inputs = random_inputs(model, seed=0)
    # Building a zoo model peaks above most engines (VGG-19's builder: 3.36 GB, the same
    # figure every engine's column showed before the mark was reset here): the peak counts
    # from now, with the model and its inputs held as every engine holds them.
    gc.collect()
    trim_heap()
    with PeakMemory() as peak:
        result = _measure(engine, model, inputs, threads, runs, profile)
    result["peak_rss_mb"] = peak.peak_bytes / 2**20
    return result


def _measure(engine: str, model, inputs, threads: int, runs: int, profile: bool) -> dict:
    """``worker``'s measurement of ``engine`` on the built model."""
    result: dict = {}
    if engine.startswith("side"):
        compiled, _ = _glow(model, threads)
        session, _ = _ort(model, threads)
        engines = {"glow": lambda: compiled.run(inputs), "ort": lambda: session.run(None, inputs)}
        if "+ov" in engine:
            request, _ = _openvino(model, threads)
            engines["ov"] = lambda: request.infer(inputs)
        times: dict[str, list[float]] = {name: [] for name in engines}
        for block in range(-(-runs // 3) + 1):
            for name, fn in engines.items():  # blocks of 3 runs: ort's spinning pool calms down between
                for _ in range(3):
                    start = time.perf_counter()
                    fn()
                    if block > 0:  # the first block warms up
                        times[name].append(time.perf_counter() - start)
        for name, samples in times.items():
            result[f"{name}_ms"] = float(np.median(samples)) * 1e3
    elif engine == "opencl":
        compiled, result["compile_s"] = _opencl(model)
        if profile:
            from glow_opencl.profile import profile as kernel_profile

            result["profile"] = kernel_profile(compiled, inputs, runs=max(1, runs)).table()
        else:
            result["ms"] = _median_ms(lambda: compiled.run(inputs), 1, 3)
    elif engine == "ov":
        request, result["compile_s"] = _openvino(model, threads)
        result["ms"] = _median_ms(lambda: request.infer(inputs), 1, runs)
    elif engine == "ort":
        session, result["compile_s"] = _ort(model, threads)
        result["ms"] = _median_ms(lambda: session.run(None, inputs), 1, runs)
    else:
        compiled, result["compile_s"] = _glow(model, threads, profile)
        result["backend_compile_s"] = compiled.compile_seconds
        result["cache_hit"] = compiled.cache_hit
        result["ms"] = _median_ms(lambda: compiled.run(inputs), 1, runs)
        if profile:
            result["profile"] = compiled.profile_table(top=25)
    return result


def _child(engine: str, model: str, batch: int, threads: int, runs: int, cache: str, profile=False) -> dict:
    # PoCL's CPU device starts one worker thread per core unless capped: the same threads.
    env = {**os.environ, "GLOW_CPU_CACHE_DIR": cache, "POCL_MAX_PTHREAD_COUNT": str(threads)}
    args = [
        sys.executable,
        __file__,
        "--worker",
        engine,
        model,
        str(batch),
        str(threads),
        str(runs),
        str(int(profile)),
    ]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _alone(
    model: str, batch: int, threads: int, runs: int, cache: str, rounds: int
) -> tuple[list[dict], list[dict]]:
    """``rounds`` pairs of children, glow-cpu (warm cache) and onnxruntime each alone, the
    order swapped every round: one child per engine measured minutes apart read the VM's
    speed as much as the engines' (BERT-mini, batch 1, six rounds on the development VM:
    glow-cpu 11.6-14.3 ms and onnxruntime 14.2-17.2 ms per child, both in two modes a
    minute apart; a single pair gave ratios from 0.81 to 0.99 that morning)."""
    glow: list[dict] = []
    ort: list[dict] = []
    for round_ in range(rounds):
        for engine in ("glow", "ort") if round_ % 2 == 0 else ("ort", "glow"):
            (glow if engine == "glow" else ort).append(_child(engine, model, batch, threads, runs, cache))
    return glow, ort


def _row(
    model: str, batch: int, threads: int, runs: int, opencl: bool, openvino: bool, alone_rounds: int
) -> str:
    side_engine = "side" + ("+ov" if openvino else "")
    with tempfile.TemporaryDirectory() as cache:
        cold = _child("glow", model, batch, threads, runs, cache)
        warms, orts = _alone(model, batch, threads, runs, cache, alone_rounds)
        ov = _child("ov", model, batch, threads, runs, cache) if openvino else {}
        side = _child(side_engine, model, batch, threads, runs, cache)
        cl = _child("opencl", model, batch, threads, runs, cache) if opencl else {}
    failed = next((r["error"] for r in (cold, *warms, *orts, ov, side, cl) if "error" in r), None)
    if failed:
        return f"| {model} | {batch} | {threads} | error: {failed} |"
    warm, ort = warms[0], orts[0]  # compile time and peak: the first of each
    ratio = side["glow_ms"] / side["ort_ms"]
    alone = float(np.median([g["ms"] / o["ms"] for g, o in zip(warms, orts, strict=True)]))
    glow_alone = float(np.median([g["ms"] for g in warms]))
    ort_alone = float(np.median([o["ms"] for o in orts]))
    vino = ""
    if openvino:
        vino = (
            f"{side['ov_ms']:.2f} | {side['glow_ms'] / side['ov_ms']:.2f} | "
            f"{ov['compile_s']:.2f} | {ov['peak_rss_mb']:.0f} | "
        )
    device = ""
    if opencl:
        device = f"{cl['ms']:.2f} | {cl['ms'] / glow_alone:.2f} | {cl['compile_s']:.2f} | "
    return (
        f"| {model} | {batch} | {threads} | {side['glow_ms']:.2f} | {side['ort_ms']:.2f} | {ratio:.2f} | "
        f"{glow_alone:.2f} / {ort_alone:.2f} = {alone:.2f} | "
        f"{device}{cold['backend_compile_s']:.2f} / {warm['backend_compile_s']:.3f} | "
        f"{cold['compile_s']:.2f} | {ort['compile_s']:.2f} | "
        f"{cold['peak_rss_mb']:.0f} | {ort['peak_rss_mb']:.0f} | {vino}"
    )


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--profile", metavar="MODEL", help="print a per-instruction profile of MODEL")
    parser.add_argument(
        "--backend",
        choices=("cpu", "opencl"),
        default="cpu",
        help="whose profile --profile prints (opencl: device time per kernel, from profiling events)",
    )
    parser.add_argument(
        "--cpu-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a glow-cpu option for every glow compile (VALUE as JSON: winograd=false)",
    )
    parser.add_argument(
        "--alone-rounds",
        type=int,
        default=3,
        metavar="R",
        help="pairs of alone children (glow-cpu, onnxruntime; order swapped each round) whose "
        "medians the alone column reports (default 3)",
    )
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_option:
        pairs = (option.split("=", 1) for option in args.cpu_option)
        os.environ[CPU_OPTIONS_ENV] = json.dumps({key: json.loads(value) for key, value in pairs})
    if args.worker:
        engine, model, batch, threads, runs, profile = args.worker
        print(json.dumps(worker(engine, model, int(batch), int(threads), int(runs), profile == "1")))
        return
    if args.profile:
        engine = "glow" if args.backend == "cpu" else "opencl"
        with tempfile.TemporaryDirectory() as cache:
            figures = _child(engine, args.profile, args.batches[0], args.threads[0], args.runs, cache, True)
        print(figures.get("profile") or figures)
        return
    machine = _cpu_name()
    print(f"# {date.today()} {platform.node()} {machine}, {os.cpu_count()} CPUs")
    device = opencl_device()
    if device:
        print(f"# opencl device: {device} (POCL_MAX_PTHREAD_COUNT = threads)")
    vino = openvino_version()
    if vino:
        print(f"# OpenVINO {vino}: CPU plugin, f32, one stream")
    opencl_head = "opencl ms | opencl/glow | opencl compile s | " if device else ""
    vino_head = "ov ms | glow/ov | ov compile s | ov peak MB |" if vino else ""
    print(
        f"| model | batch | threads | glow ms | ort ms | glow/ort | alone: glow / ort ms | {opencl_head}"
        "glow compile s cold / warm | glow total compile s | ort session s | glow peak MB | ort peak MB |"
        f"{vino_head}"
    )
    print(
        "|---|--:|--:|--:|--:|--:|--:|"
        + ("--:|--:|--:|" if device else "")
        + "--:|--:|--:|--:|--:|"
        + ("--:|--:|--:|--:|" if vino else "")
    )
    for model in args.models:
        for batch in args.batches:
            for threads in args.threads:
                runs = (
                    max(3, args.runs // 4)
                    if SLOW_BATCH.get(model, 0) and batch >= SLOW_BATCH[model]
                    else args.runs
                )
                devices = (device is not None, vino is not None)
                print(_row(model, batch, threads, runs, *devices, args.alone_rounds), flush=True)


if __name__ == "__main__":
    main()
