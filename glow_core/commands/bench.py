"""``glow bench MODEL``: latency statistics, throughput and peak memory of one model on one
backend, optionally beside onnxruntime in the same process on the same inputs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from glow_core.cache import format_size
from glow_core.commands.console import print_table
from glow_core.commands.measure import Latencies, PeakMemory, time_runs
from glow_core.errors import GlowError, InputError

DEFAULT_SECONDS = 3.0
"""Timed seconds when neither --runs nor --time is given (trtexec's default duration)."""

EXAMPLES = """\
examples:
  glow bench zoo:resnet50                              # cpu (or the best backend), 3 s of runs
  glow bench zoo:resnet50 --compare onnxruntime        # onnxruntime beside it, same inputs
  glow bench model.onnx --batch 8 --threads 4 --runs 200
  glow bench model.onnx --shape input=1,3,320,320 --time 10

Latency is per run (min, median, p90, p99 nearest-rank, mean) after --warmup untimed runs;
throughput is inferences (runs x batch) per second of the timed loop; peak RSS is the
process's resident-set high-water mark while that engine compiled and ran.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "bench",
        help="latency (min/median/p90/p99), throughput and peak memory; --compare onnxruntime",
        description="Time a model on one backend, optionally beside onnxruntime in the same process.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="an .onnx file, or zoo:NAME for a built-in model")
    parser.add_argument("--backend", metavar="NAME", help="backend name (default: the best installed)")
    parser.add_argument("--threads", type=int, metavar="N", help="threads per inference, for both engines")
    parser.add_argument("--batch", type=int, metavar="N", help="the size of a symbolic first input dimension")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2", help="an input's shape")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a backend option")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--runs", type=int, metavar="N", help="timed runs")
    amount.add_argument(
        "--time", type=float, metavar="S", help=f"time runs for S seconds (default {DEFAULT_SECONDS:g})"
    )
    parser.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed runs first (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument(
        "--compare", choices=("onnxruntime",), help="also time onnxruntime (CPU) on the same inputs"
    )
    parser.set_defaults(func=cmd_bench)


@dataclass
class EngineResult:
    """One engine's figures: what it is, how long it took to get ready, its runs, its memory."""

    engine: str
    prepare_seconds: float
    latencies: Latencies
    peak_bytes: int


def cmd_bench(args: argparse.Namespace) -> int:
    from glow_core.commands.arguments import load_onnx_proto, parse_options
    from glow_core.commands.progress import shown
    from glow_core.commands.shapes import resolve_shapes

    _check_counts(args)
    proto = load_onnx_proto(args.model)
    shapes, notes = resolve_shapes(proto, args.shape, args.batch)
    for note in notes:
        print(note, file=sys.stderr)
    amount = {"runs": args.runs, "seconds": None if args.runs else (args.time or DEFAULT_SECONDS)}
    with shown():
        glow, inputs, setup = _bench_glow(proto, shapes, args, parse_options(args.option), amount)
        results = [glow]
        if args.compare == "onnxruntime":
            results.append(_bench_onnxruntime(proto, inputs, args.threads, args.warmup, amount))
    batch = _batch_of(inputs)
    signature = ", ".join(f"{n} {v.dtype}{list(v.shape)}" for n, v in inputs.items())
    print(f"model: {args.model}  inputs: {signature}  batch: {batch}")
    print(setup)
    _print_results(results, batch)
    return 0


def _check_counts(args: argparse.Namespace) -> None:
    for flag, value in (("--threads", args.threads), ("--batch", args.batch), ("--runs", args.runs)):
        if value is not None and value < 1:
            raise InputError(f"{flag} {value}: give a positive number")
    if args.time is not None and not args.time > 0:
        raise InputError(f"--time {args.time:g}: give a positive number of seconds")
    if args.warmup < 0:
        raise InputError(f"--warmup {args.warmup}: give zero or more runs")
    if args.backend and "," in args.backend:
        raise InputError(f"--backend {args.backend}: bench times one backend; give one name")


def _bench_glow(proto, shapes, args, options, amount) -> tuple[EngineResult, dict[str, np.ndarray], str]:
    import glow_core
    from glow_core import progress
    from glow_core.plugins import get_backend

    backend = get_backend(args.backend)
    info = backend.info()
    if args.threads is not None:
        if "threads" not in backend.Options.model_fields:
            raise InputError(f"--threads: backend {info.name!r} has no threads option; leave --threads out")
        options = {**options, "threads": args.threads}
    parsed = backend.parse_options(options)
    with PeakMemory() as memory:
        start = time.perf_counter()
        compiled = glow_core.compile(proto, backend, shapes or None, parsed)
        compile_seconds = time.perf_counter() - start
        rng = np.random.default_rng(args.seed)
        inputs = {n: _random_input(rng, t.shape, t.dtype) for n, t in compiled.input_types.items()}
        progress.step(f"timing glow ({info.name})")
        latencies = time_runs(lambda: compiled.run(inputs), warmup=args.warmup, **amount)
    threads = getattr(parsed, "threads", None)
    hit = getattr(compiled, "cache_hit", None)
    cached = " (from the compile cache)" if hit else ""
    setup = (
        f"glow: backend {info.name} {info.version} ({info.device})"
        + (f", threads: {threads}" if threads else "")
        + f", compiled in {compile_seconds:.2f} s{cached}"
    )
    engine = EngineResult(f"glow {info.name}", compile_seconds, latencies, memory.peak_bytes)
    return engine, inputs, setup


def _bench_onnxruntime(
    proto, inputs: dict[str, np.ndarray], threads: int | None, warmup: int, amount
) -> EngineResult:
    from glow_core import progress

    try:
        import onnxruntime
    except ImportError:
        raise GlowError(
            "--compare onnxruntime: onnxruntime is not installed (`pip install onnxruntime`)"
        ) from None
    with PeakMemory() as memory:
        progress.step("onnxruntime session")
        start = time.perf_counter()
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        session = _oracle_call(
            lambda: onnxruntime.InferenceSession(
                proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        )
        prepare = time.perf_counter() - start
        _oracle_call(lambda: session.run(None, inputs))  # a refusal is an error, not a traceback
        progress.step("timing onnxruntime")
        latencies = time_runs(lambda: session.run(None, inputs), warmup=warmup, **amount)
    return EngineResult(f"onnxruntime {onnxruntime.__version__}", prepare, latencies, memory.peak_bytes)


def _oracle_call(call: Callable[[], object]):
    try:
        return call()
    except Exception as err:
        first = " ".join(str(err).split())[:400] or type(err).__name__
        raise GlowError(
            f"--compare onnxruntime: onnxruntime refuses the model or these inputs: {first}"
        ) from None


def _random_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Standard-normal floats; small non-negative integers (valid indices for most models)."""
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(0, 4, shape).astype(dtype)


def _batch_of(inputs: dict[str, np.ndarray]) -> int:
    """The first input's first dimension: inferences per run, for throughput."""
    first = next(iter(inputs.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _print_results(results: list[EngineResult], batch: int) -> None:
    columns = ("engine", "ready in", "runs", "min", "median", "p90", "p99", "mean", "throughput", "peak RSS")
    rows = []
    for r in results:
        lat = r.latencies
        rows.append(
            (
                r.engine,
                _duration(r.prepare_seconds),
                str(len(lat.runs)),
                _duration(min(lat.runs)),
                _duration(lat.median),
                _duration(lat.percentile(90)),
                _duration(lat.percentile(99)),
                _duration(lat.mean),
                f"{lat.throughput(batch):.1f}/s",
                format_size(r.peak_bytes),
            )
        )
    print_table(columns, rows, numeric=columns[1:])
    if len(results) == 2:
        glow, other = results
        ratio = glow.latencies.median / other.latencies.median
        verdict = "glow faster" if ratio < 1 else "glow slower" if ratio > 1 else "even"
        print(f"median latency, {glow.engine} / {other.engine}: {ratio:.2f}x ({verdict})")
