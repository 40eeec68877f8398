"""A code-generator switch measured on a whole zoo model: the model compiled with the switch
off ("before") and on ("after"), both beside onnxruntime round-robin in one process, then the
per-instruction profile medians of the layers the switch concerns, before and after, with
onnxruntime's nodes. Shared by the benches of single changes (``depthwise_layers.py``,
``projection_layers.py``, ``transpose_ab.py``), as is ``single_layers``: the same for single
convolution layers.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from round_robin import median_ms


def ort_session(model: Any, threads: int = 1, profile_prefix: str | None = None) -> Any:
    """An onnxruntime session of ``model`` on ``threads`` intra-op threads (one inter-op);
    with ``profile_prefix`` it records its node events into a file of that prefix
    (``end_profiling`` names it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def whole_model(
    batch: int,
    runs: int,
    switched_off: Callable[[], contextlib.AbstractContextManager],
    concerned: Callable[[Any], set[str]],
    label: str,
    model_name: str = "mobilenetv2",
    cpu_time: bool = False,
    instructions: tuple[str, Callable[[str], bool]] | None = None,
    after_first: bool = False,
) -> None:
    """``model_name`` before and after beside onnxruntime; then the profile rows of the
    convolutions ``concerned(model)`` names (``label`` heads their table), and with
    ``instructions`` (a heading, a test of glow's instruction names) a table of the glow
    instructions it picks, before and after (layers onnxruntime names otherwise, such as a
    transformer's dense layers, have no pair to show). With ``cpu_time``
    the latencies are the calling thread's CPU time (``round_robin.median_ms``). The
    profiles of the two builds are taken in alternating rounds of 3 runs, each first in
    every other round, so a change of load between them hits both.

    Where each build lands in memory is a bias of its own: two identical builds in one
    process ran 5-10% apart, either way (Inception-v3 at batch 8: the one compiled second
    4.5% slower by the median of 6 profiled rounds; a 7x7 layer on two threads: 6-10%
    faster; 2026-11-27, docs/performance.md). ``after_first`` compiles "after" first: run
    both orders and read both."""
    from profile_pairs import ort_profile, pairs

    import glow_core
    from glow_core.accuracy import relative_error
    from glow_core.model_zoo import MODELS, random_inputs

    model = MODELS[model_name](batch=batch)
    inputs = random_inputs(model, seed=0)
    convs = concerned(model)
    builds = {}
    order = (("before", False), ("after", False), ("before_p", True), ("after_p", True))
    if after_first:
        order = (("after", False), ("before", False), ("after_p", True), ("before_p", True))
    for name, profile in order:
        options = {"threads": 1, "cache": False, "profile": profile}
        with switched_off() if name.startswith("before") else contextlib.nullcontext():
            builds[name] = glow_core.compile(model, backend="cpu", options=options)
    session = ort_session(model)
    expected = session.run(None, inputs)[0]
    for name in ("before", "after"):
        got = next(iter(builds[name].run(inputs).values()))
        print(f"{name}: relative error against onnxruntime {relative_error(got, expected):.2e}")
    engines = {
        "before": builds["before"].run,
        "after": builds["after"].run,
        "ort": lambda feeds: session.run(None, feeds),
    }
    ms = median_ms(engines, inputs, runs, time.thread_time if cpu_time else time.perf_counter)
    print(
        f"batch {batch}, {'CPU' if cpu_time else 'wall'} time: "
        f"glow before {ms['before']:.2f} ms ({ms['before'] / ms['ort']:.3f}x), "
        f"after {ms['after']:.2f} ms ({ms['after'] / ms['ort']:.3f}x), onnxruntime {ms['ort']:.2f} ms"
    )
    profile_runs = max(6, runs // 4 // 3 * 3)
    rounds: dict[str, dict[str, list[float]]] = {"before_p": {}, "after_p": {}}
    for round_ in range(profile_runs // 3):
        for name in sorted(rounds, reverse=round_ % 2 == 1):  # who goes first alternates
            medians, compiled = rounds[name], builds[name]
            for row in compiled.median_profile(compiled.check_inputs(inputs), 3):
                medians.setdefault(row.name, []).append(row.seconds * 1e3)
    glow = {name: {i: statistics.median(v) for i, v in medians.items()} for name, medians in rounds.items()}
    ort_ms = ort_profile(model, inputs, 1, profile_runs)
    before = {conv: ms for conv, ms, _ in pairs(model, glow["before_p"], ort_ms)}
    rows = [row for row in pairs(model, glow["after_p"], ort_ms) if row[0] in convs]
    print(f"\nprofiles: median of {profile_runs // 3} rounds of 3 profiled runs each")
    if rows:
        print(f"\n{label}\n")
        print("| convolution | glow before ms | glow after ms | ort ms | before/ort | after/ort |")
        print("|---|--:|--:|--:|--:|--:|")
        for conv, after_ms, ort_conv in sorted(rows):
            print(
                f"| {conv} | {before[conv]:.3f} | {after_ms:.3f} | {ort_conv:.3f} "
                f"| {before[conv] / ort_conv:.2f} | {after_ms / ort_conv:.2f} |"
            )
        totals = [sum(before[r[0]] for r in rows), sum(r[1] for r in rows), sum(r[2] for r in rows)]
        print(
            f"| all {len(rows)} | {totals[0]:.3f} | {totals[1]:.3f} | {totals[2]:.3f} "
            f"| {totals[0] / totals[2]:.2f} | {totals[1] / totals[2]:.2f} |"
        )
    if instructions is not None:
        print(f"\n{instructions[0]}\n")
        print("| instruction | glow before ms | glow after ms | after/before |")
        print("|---|--:|--:|--:|")
        picked = [{n: ms for n, ms in glow[b].items() if instructions[1](n)} for b in ("before_p", "after_p")]
        for name in sorted(picked[0].keys() | picked[1].keys()):
            old, new = picked[0].get(name, float("nan")), picked[1].get(name, float("nan"))
            print(f"| {name} | {old:.3f} | {new:.3f} | {new / old:.3f} |")
        old, new = sum(picked[0].values()), sum(picked[1].values())
        print(f"| all {len(picked[0])} / {len(picked[1])} | {old:.3f} | {new:.3f} | {new / old:.3f} |")
    print(
        f"all instructions: glow before {sum(glow['before_p'].values()):.2f} ms, "
        f"after {sum(glow['after_p'].values()):.2f} ms, onnxruntime nodes {sum(ort_ms.values()):.2f} ms"
    )


def conv_names(model: Any, selected: Callable[[dict[str, Any]], bool]) -> set[str]:
    """The names of ``model``'s Conv nodes whose attributes ``selected`` takes: a dict from
    each attribute's name to its ints (``kernel_shape``, ``strides``...) or its int
    (``group``); an attribute the node leaves out is absent (ONNX's default applies)."""
    names = set()
    for node in model.graph.node:
        if node.op_type == "Conv":
            attributes = {a.name: list(a.ints) if a.ints else a.i for a in node.attribute}
            if selected(attributes):
                names.add(node.name)
    return names


def grouped_convs(model: Any, depthwise: bool) -> set[str]:
    """The Conv nodes of ``model`` that are depthwise (group > 1), or those that are not."""
    return conv_names(model, lambda attributes: (attributes.get("group", 1) > 1) == depthwise)


def single_layers(
    shapes: Sequence[tuple[tuple[int, ...], str]],
    switched_off: Callable[[], contextlib.AbstractContextManager],
    runs: int,
    cpu_time: bool = False,
) -> None:
    """One table row per layer: ``(shape, epilogue)`` of ``cpu_cases.conv_model`` (shape
    ``(n, c, h, w, cout, k, stride, pad, group)``) compiled with the switch off and on, both
    checked against onnxruntime, then timed round-robin beside it (``median_ms``)."""
    from cpu_cases import conv_model

    import glow_core
    from glow_core.accuracy import relative_error

    options = {"threads": 1, "cache": False}
    print("| layer | glow before ms | glow after ms | ort ms | before/ort | after/ort | after/before |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for shape, epilogue in shapes:
        model, feeds, output = conv_model(shape, epilogue, shape[1] + shape[4])
        with switched_off():
            before = glow_core.compile(model, backend="cpu", options=options)
        after = glow_core.compile(model, backend="cpu", options=options)
        session = ort_session(model)
        expected = session.run(None, feeds)[0]
        for compiled in (before, after):
            assert relative_error(compiled.run(feeds)[output], expected) < 1e-5
        engines = {"before": before.run, "after": after.run, "ort": lambda f, s=session: s.run(None, f)}
        ms = median_ms(engines, feeds, runs, time.thread_time if cpu_time else time.perf_counter)
        n, c, size, _, cout, kernel, stride = shape[:7]
        name = f"{c} -> {cout}, {kernel}x{kernel} s{stride} on {size}x{size}"
        name += f", batch {n}" if n > 1 else ""
        print(
            f"| {name} | {ms['before']:.4f} | {ms['after']:.4f} | {ms['ort']:.4f} "
            f"| {ms['before'] / ms['ort']:.2f} | {ms['after'] / ms['ort']:.2f} "
            f"| {ms['after'] / ms['before']:.3f} |",
            flush=True,
        )


def layers_or_model_cli(
    doc: str,
    layers: Sequence[tuple[int, ...]],
    switched_off: Callable[[], contextlib.AbstractContextManager],
    concerned: Callable[[Any], set[str]],
    label: str,
) -> None:
    """The command line of a bench of one switch: ``layers`` (``(n, c, h, w, cout, k, stride,
    pad, group)``, Conv + bias + ReLU) by ``single_layers``, or with ``--model M`` the zoo
    model by ``whole_model``, whose profile rows are the convolutions ``concerned`` names
    (``label`` heads them)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--model", help=f"a zoo model, whole, and the profile rows of its {label}")
    parser.add_argument("--cpu-time", action="store_true", help="time the calling thread's CPU time")
    parser.add_argument("--after-first", action="store_true", help="compile the 'after' builds first")
    args = parser.parse_args()
    if args.model:
        whole_model(
            args.batch, args.runs, switched_off, concerned, label, args.model, args.cpu_time,
            after_first=args.after_first,
        )  # fmt: skip
        return
    shapes = [((args.batch, *layer[1:]), "bias_relu") for layer in layers]
    single_layers(shapes, switched_off, args.runs, args.cpu_time)
