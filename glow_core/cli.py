"""The ``glow`` command: list backends, run a model, dump any stage, run the demo.

Every GlowError is printed as one line (``error: ...``) with exit status 2: a user never
sees a traceback from deep inside the compiler for a mistake of theirs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from glow_core.cli_quantize import add_profile_command, add_quantize_options, precision_of
from glow_core.commands.arguments import (
    backend_arg,
    device_options,
    load_onnx_proto,
    parse_inputs,
    parse_options,
    parse_partition,
)
from glow_core.commands.shapes import parse_shapes
from glow_core.errors import GlowError, InputError, exit_status

if TYPE_CHECKING:
    from glow_core.backend import Backend


def cmd_backends(args: argparse.Namespace) -> int:
    """The backends and every plugin problem; status 1 when any plugin is broken."""
    from glow_core.plugins import registry

    reg = registry()
    shared = reg.duplicates()
    rows = [("name", "version", "distribution", "primitives", "status")]
    for record in reg.plugins.values():
        if record.error:
            rows.append((record.name, record.version, record.distribution, "-", f"FAILED: {record.error}"))
        for name, info in record.infos.items():
            if name in shared:
                others = ", ".join(repr(r.name) for r in shared[name] if r is not record)
                status = f"FAILED: backend name also provided by plugin {others}; neither is used"
            else:
                status = f"ok ({info.device})"
            rows.append((name, info.version, record.distribution, str(len(info.supports)), status))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[4])
    _print_cache_locations()
    broken = reg.errors()
    if broken:
        print(
            f"{len(broken)} plugin(s) failed: {', '.join(broken)}; their errors are above "
            "(fix or uninstall them)",
            file=sys.stderr,
        )
        return 1
    return 0


def _print_cache_locations() -> None:
    """Where each backend keeps compiled code (``glow cache info`` has the figures)."""
    from glow_core.commands.cache import backend_caches

    for name, cache in backend_caches().items():
        print(f"compile cache ({name}): {cache.directory}  (glow cache info|clear)")


def _with_profiling(backend: str | None, options: dict[str, object]) -> dict[str, object]:
    """``options`` plus ``profile=True`` when the backend has that option (its code then
    times each kernel, as glow-cpu's does); a backend that profiles without it (OpenCL
    events) or not at all gets ``options`` unchanged, and says so when asked to profile."""
    from glow_core.runtime.pipeline import choose_backend

    _, defaults = choose_backend(backend, None)
    if "profile" in type(defaults).model_fields:
        return {"profile": True, **options}
    return options


def _summary(value: np.ndarray) -> str:
    """Mean and largest magnitude of an output; an empty one has neither, and says so."""
    if value.size == 0:
        return "(empty: no elements)"
    return f"mean={value.mean():.6g} max|x|={np.abs(value).max():.6g}"


def cmd_run(args: argparse.Namespace) -> int:
    import glow_core
    from glow_core.accuracy import onnxruntime_outputs

    proto = load_onnx_proto(args.model)
    backend = backend_arg(args.backend)
    options: dict[str, object] = parse_options(args.option)
    partition = parse_partition(args.partition)
    if args.trace and not isinstance(backend, list):
        from glow_core.plugins import get_backend

        backend = [backend or get_backend().info().name]
    if isinstance(backend, list):
        options = device_options(options, backend)
        if args.profile or args.trace:
            options = {
                label: _with_profiling(name, opts)  # type: ignore[arg-type]
                for (label, opts), name in zip(options.items(), backend, strict=True)
            }
    elif args.profile:
        options = _with_profiling(backend, options)
    from glow_core.commands.progress import shown
    from glow_core.commands.run_info import backend_label, compiled_line, latency_line
    from glow_core.commands.shapes import resolve_shapes

    shapes, notes = resolve_shapes(proto, args.shape)
    for note in notes:
        print(note, file=sys.stderr)
    with shown():
        start = time.perf_counter()
        compiled = glow_core.compile(
            proto,
            backend=backend,
            input_shapes=shapes or None,
            options=options,
            partition=partition,
            precision=precision_of(args),
        )
        print(compiled_line(compiled, backend_label(backend), time.perf_counter() - start))
    summary = getattr(compiled, "summary", None)
    if summary is not None:
        print(summary())
    inputs = parse_inputs(args.input)
    if not inputs:
        rng = np.random.default_rng(args.seed)
        inputs = {n: rng.standard_normal(t.shape).astype(t.dtype) for n, t in compiled.input_types.items()}
    # Profiled first: a backend that cannot time its kernels refuses before anything is printed.
    with shown():
        table = compiled.profile(inputs, runs=args.runs) if args.profile else None
    start = time.perf_counter()
    if args.trace:
        from glow_core.runtime.trace import TraceRecorder

        recorder = TraceRecorder()
        outputs = compiled.run_traced(inputs, recorder)  # type: ignore[attr-defined]
        recorder.write(args.trace)
        print(f"trace: {args.trace} ({len(recorder.events)} events; open it in Perfetto or chrome://tracing)")
    else:
        outputs = compiled.run(inputs)
    print(latency_line(time.perf_counter() - start))
    for name, value in outputs.items():
        print(f"{name}: {value.dtype}{list(value.shape)} {_summary(value)}")
    if args.save:
        np.savez(args.save, **outputs)
    if table is not None:
        print(table)
    if args.check:
        return _check(args, outputs, onnxruntime_outputs(proto, inputs))
    return 0


def _check(args: argparse.Namespace, outputs: dict, expected: dict) -> int:
    """``glow run --check``: 0 when the outputs agree with onnxruntime's float model, else 1.
    A float run is judged by relative error (``--tolerance``, default 1e-4); a quantized or
    reduced-precision run (``--quantize``, ``--precision``) by cosine similarity per image
    (``accuracy.APPROXIMATE_COSINE``) unless ``--tolerance`` is given: its error against a
    float32 model is the quantization's, orders of magnitude over 1e-4."""
    from glow_core.accuracy import APPROXIMATE_COSINE, max_relative_error, min_cosine_similarity

    error = max_relative_error(outputs, expected)
    if (args.quantize or args.precision) and args.tolerance is None:
        cosine = min_cosine_similarity(outputs, expected)
        ok = cosine >= APPROXIMATE_COSINE
        mode = "quantized" if args.quantize else args.precision
        print(
            f"vs onnxruntime's float model: max relative error {error:.3e}, cosine similarity "
            f"{cosine:.5f} ({'OK' if ok else 'MISMATCH'}: a {mode} run must keep cosine >= "
            f"{APPROXIMATE_COSINE}; --tolerance judges by relative error instead)"
        )
        return 0 if ok else 1
    tolerance = 1e-4 if args.tolerance is None else args.tolerance
    verdict = "OK" if error < tolerance else "MISMATCH"
    print(f"max relative error vs onnxruntime: {error:.3e} ({verdict}, tolerance {tolerance:g})")
    return 0 if error < tolerance else 1


def _partition_plan(args: argparse.Namespace):
    """The partition plan of ``glow dump/report`` for ``--backend`` (one name or a list)."""
    from glow_core.runtime.partitioned import plan_partitions
    from glow_core.runtime.pipeline import load_model

    backend = backend_arg(args.backend)
    backends = backend if isinstance(backend, list) else [backend] if backend else [None]
    if backends == [None]:
        from glow_core.plugins import get_backend

        backends = [get_backend().info().name]
    options = device_options(parse_options(getattr(args, "option", [])), backends)  # type: ignore[arg-type]
    module = load_model(load_onnx_proto(args.model), parse_shapes(args.shape) or None)
    return plan_partitions(module, backends, options, by_hand=parse_partition(getattr(args, "partition", [])))


def cmd_dump(args: argparse.Namespace) -> int:
    from glow_core.graph.printer import function_to_dot
    from glow_core.ir.printer import ir_to_dot
    from glow_core.plugins import get_backend
    from glow_core.runtime.pipeline import backend_pipeline, compile_stages, load_model

    if args.list_steps:
        from glow_core.pipeline.steps import DEFAULT_PIPELINE, describe

        pipeline = backend_pipeline(get_backend(args.backend)) if args.backend else DEFAULT_PIPELINE
        print(describe(pipeline), end="")
        return 0
    if args.model is None:
        raise InputError("glow dump: give a model (an .onnx file or zoo:NAME), or --list-steps")
    if args.stage == "partitions":
        from glow_core.partition.draw import plan_to_dot, plan_to_svg, plan_to_text

        plan = _partition_plan(args)
        draw = {"text": plan_to_text, "dot": plan_to_dot, "svg": lambda p: plan_to_svg(p, args.model)}
        print(draw[args.format](plan), end="")
        return 0
    if isinstance(backend_arg(args.backend), list):
        raise GlowError(
            f"--backend {args.backend}: a backend list has the stage 'partitions' only; dump a stage "
            "of one partition's backend with --backend NAME"
        )
    module = load_model(load_onnx_proto(args.model), parse_shapes(args.shape) or None)
    if args.format == "dot" and args.stage == "graph":
        print(function_to_dot(module.function), end="")
        return 0
    backend = get_backend(args.backend)
    if args.keep:
        backend = _keeping(backend, [k for given in args.keep for k in given.split(",") if k])
    stages = compile_stages(module, backend, keep_text=True, dump_after=args.after)
    if args.after:
        if args.after not in stages.passes.dumps:
            raise GlowError(
                f"step {args.after!r} did not run for backend {stages.backend.info().name!r}; "
                "`glow dump --list-steps` lists the steps (code generation is not dumped)"
            )
        print(stages.passes.dumps[args.after], end="")
    elif args.format == "text":
        print(stages.texts[args.stage], end="")
    elif args.format == "svg":
        if args.stage != "memory":
            raise GlowError("--format svg is the memory plan's picture: use it with --stage memory")
        from glow_core.ir.memory_svg import memory_to_svg

        print(memory_to_svg(stages.plan, f"{args.model} on {stages.backend.info().name}"), end="")
    elif args.stage == "ir":
        print(ir_to_dot(stages.ir), end="")
    elif args.stage == "memory":
        raise GlowError("the memory stage has a text format only (--format text)")
    else:
        raise GlowError(f"--format dot for stage {args.stage!r}: only 'graph' and 'ir' have DOT dumps")
    return 0


def _keeping(backend: Backend, kinds: list[str]) -> Backend:
    """The same backend keeping the high-level node kinds ``kinds`` unlowered: for backends
    whose constructor takes ``keep`` (the interpreter, as the reference for kept nodes)."""
    try:
        return type(backend)(keep=kinds)  # type: ignore[call-arg]
    except TypeError:
        raise GlowError(
            f"backend {backend.info().name!r} cannot be asked to keep nodes (its constructor takes "
            "no keep=); use --backend interpreter, which keeps any high-level node"
        ) from None


def cmd_report(args: argparse.Namespace) -> int:
    import json

    from glow_core.plugins import get_backend
    from glow_core.report import CompileReport, PartitionedReport
    from glow_core.runtime.pipeline import compile_stages, load_model

    if isinstance(backend_arg(args.backend), list) or args.partition:
        report: CompileReport | PartitionedReport = PartitionedReport.of(_partition_plan(args))
    else:
        module = load_model(load_onnx_proto(args.model), parse_shapes(args.shape) or None)
        report = CompileReport.of(compile_stages(module, get_backend(args.backend)))
    print(
        json.dumps(report.as_dict(), indent=2) if args.json else report.as_table(),
        end="\n" if args.json else "",
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from glow_core.demo import main as demo_main

    return demo_main(args.backend)


EXAMPLES = """\
examples:
  glow backends                                  # installed backends, plugin errors, cache location
  glow run zoo:small_cnn --check                 # random inputs, compare with onnxruntime
  glow run model.onnx --shape input=1,3,224,224  # give symbolic input dimensions
  glow bench zoo:resnet50 --compare onnxruntime  # latency table beside onnxruntime
  glow dump zoo:small_cnn --stage ir             # any stage as text or DOT
  glow report zoo:resnet50 --json | head         # compile figures
  glow conformance --backend cpu                 # the conformance suite on one backend
  glow cache info                                # compile cache: where, how big

`glow COMMAND --help` has each command's options and examples.
"""


def closed_pipe() -> int:
    """The reader of stdout went away (``glow report --json | head``): stop quietly, as
    command-line tools do, with status 141 (128 + SIGPIPE). Python would otherwise print a
    traceback, and another one when it flushes stdout at exit."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (a test's capture)
        pass
    return 141


def build_parser() -> argparse.ArgumentParser:
    from glow_core import __version__
    from glow_core.commands import bench as bench_command
    from glow_core.commands import cache as cache_command
    from glow_core.commands.examples import add_examples
    from glow_core.commands.plugin_commands import add_plugin_commands
    from glow_core.runtime.pipeline import STAGES

    parser = argparse.ArgumentParser(
        prog="glow",
        description="glow-py neural-network compiler",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("backends", help="list installed backends and plugin load errors").set_defaults(
        func=cmd_backends
    )

    def partition_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--partition",
            action="append",
            default=[],
            metavar="NODE=DEVICE",
            help="put nodes (a name or pattern of the optimized graph) on a device of the --backend list",
        )

    def model_args(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
        p.add_argument(
            "model", nargs="?" if optional else None, help="an .onnx file, or zoo:NAME for a built-in model"
        )
        p.add_argument(
            "--backend",
            help="backend name (default: best installed), or a comma-separated list in preference "
            "order (acme,cpu) to split the model across them",
        )
        p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2", help="input shape")

    run = sub.add_parser("run", help="compile and run a model")
    model_args(run)
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--check", action="store_true", help="compare with onnxruntime")
    run.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="largest relative error --check accepts (default 1e-4; a --quantize/--precision run is "
        "judged by cosine similarity unless this is given)",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--save", metavar="FILE.npz", help="save the outputs")
    run.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend option (with a backend list: every device's, or NAME.KEY=VALUE for one)",
    )
    run.add_argument(
        "--profile", action="store_true", help="print the time of each kernel (median of --runs)"
    )
    run.add_argument("--runs", type=int, default=5, help="profiled runs after one warm-up (default 5)")
    run.add_argument(
        "--trace", metavar="FILE.json", help="write a Chrome trace of the run (Perfetto, chrome://tracing)"
    )
    partition_args(run)
    add_quantize_options(run)
    run.set_defaults(func=cmd_run)
    add_profile_command(sub, model_args)

    dump = sub.add_parser("dump", help="print one stage or step of the pipeline")
    model_args(dump, optional=True)
    dump.add_argument("--stage", choices=(*STAGES, "partitions"), default="graph")
    dump.add_argument("--format", choices=("text", "dot", "svg"), default="text")
    dump.add_argument(
        "--after",
        metavar="STEP",
        help="the state right after this step or group: a path (lower/optimize-lowered/cse) or a "
        "name (its last run)",
    )
    dump.add_argument(
        "--list-steps", action="store_true", help="print the compile pipeline (of --backend if given)"
    )
    dump.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a backend option")
    dump.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="KIND[,KIND]",
        help="leave these high-level nodes unlowered (LayerNorm,Gelu,Attention), as a backend with "
        "fused kernels for them would; the backend's constructor must take keep= (the interpreter's does)",
    )
    partition_args(dump)
    dump.set_defaults(func=cmd_dump)

    report = sub.add_parser("report", help="compile figures: node counts, memory, stage times")
    model_args(report)
    report.add_argument("--json", action="store_true", help="print JSON instead of a table")
    report.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a backend option")
    partition_args(report)
    report.set_defaults(func=cmd_report)

    from glow_core.bundles.command import add_bundle_command

    add_bundle_command(sub)

    demo = sub.add_parser("demo", help="compile a small CNN and compare it with onnxruntime")
    demo.add_argument("--backend")
    demo.set_defaults(func=cmd_demo)
    bench_command.add_parser(sub)
    cache_command.add_parser(sub)
    add_examples(sub)
    add_plugin_commands(parser, sub)  # last: a plugin cannot take a built-in command's name
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def command() -> int:
        from glow_core.commands.plugin_commands import plugin_for

        parser = build_parser()
        plugin = plugin_for(parser, argv[0]) if argv else None
        if plugin is not None:  # it parses its own arguments (`glow conformance --help`)
            return plugin.run(argv[1:])
        args = parser.parse_args(argv)
        return int(args.func(args))

    try:
        return exit_status(command)
    except BrokenPipeError:
        return closed_pipe()


if __name__ == "__main__":
    sys.exit(main())
