"""glow-cpu's per-instruction profile beside onnxruntime's per-node profile, convolution by
convolution: which layers hold the whole-model ratio back.

    .venv/bin/python bench/profile_pairs.py resnet50 [--batch 1] [--threads 1] [--runs 7]

Both engines profile the same model with the same inputs and thread count; each row is the
median over ``--runs`` runs after one warm-up. glow names a fused kernel after the nodes it
fused (``layer1.0/conv1+bn/convolution``), onnxruntime after the last node of its fused chain
(``layer1.0/relu1_nchwc``); a row pairs them through the ONNX graph: from onnxruntime's node,
up through element-wise producers, to the nearest Conv, which glow's name starts with.
Profiling adds a cycle-counter read per glow kernel and an event per onnxruntime node; the
totals are a little above plain latency for both.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile

import numpy as np

CONV_SUFFIXES = ("/convolution",)


def _median(values: list[float]) -> float:
    return float(np.median(values))


def glow_profile(model, inputs, threads: int, runs: int) -> dict[str, float]:
    """Median ms of every glow-cpu instruction."""
    import glow_core

    compiled = glow_core.compile(model, backend="cpu", options={"threads": threads, "profile": True})
    rows = compiled.median_profile(compiled.check_inputs(inputs), runs)
    return {row.name: row.seconds * 1e3 for row in rows}


def ort_profile(model, inputs, threads: int, runs: int) -> dict[str, float]:
    """Median ms of every onnxruntime node (its ``_kernel_time`` events)."""
    from model_ab import ort_session

    with tempfile.TemporaryDirectory() as folder:
        session = ort_session(model, threads, os.path.join(folder, "ort"))
        session.run(None, inputs)
        for _ in range(runs):
            session.run(None, inputs)
        with open(session.end_profiling()) as file:
            return node_medians(json.load(file), runs)


def node_medians(events: list[dict], runs: int) -> dict[str, float]:
    """Median ms of every onnxruntime node over the last ``runs`` of its ``_kernel_time``
    events in a profile file (the warm-up run's events are in the file too)."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            times[event["name"].removesuffix("_kernel_time")].append(event["dur"] / 1e3)
    return {name: _median(values[-runs:]) for name, values in times.items()}


def conv_of_ort_node(model, name: str) -> str | None:
    """The Conv an onnxruntime node computes: its ONNX node, or the nearest Conv above it
    through the producers of its inputs (a fused chain Conv -> BatchNorm -> Relu is named
    after its Relu)."""
    nodes = {node.name: node for node in model.graph.node}
    producer = {out: node for node in model.graph.node for out in node.output}
    start = nodes.get(name) or nodes.get(name.removesuffix("_nchwc"))
    frontier = [start] if start is not None else []
    for _ in range(4):
        for node in frontier:
            if node.op_type == "Conv":
                return node.name
        frontier = [producer[i] for node in frontier for i in node.input if i in producer]
    return None


def conv_of_glow_instruction(name: str) -> str | None:
    """The convolution a glow kernel computes, named by the first ONNX node glow fused into it
    (``a/conv1+bn/convolution``); a kernel that computes two convolutions (an expansion and
    its depthwise layer: ``a/conv1+bn/convolution+a/conv2+bn/convolution``) gives both,
    joined by `` + ``."""
    if not name.endswith(CONV_SUFFIXES):
        return None
    steps = name.split("/convolution+")
    return " + ".join(step.removesuffix("/convolution").split("+", 1)[0] for step in steps)


def pairs(model, glow: dict[str, float], ort: dict[str, float]) -> list[tuple[str, float, float]]:
    """(conv, glow ms, ort ms) for every convolution both engines profiled, slowest excess first."""
    ort_by_conv = {}
    for node, ms in ort.items():
        conv = conv_of_ort_node(model, node)
        if conv is not None:
            ort_by_conv[conv] = ort_by_conv.get(conv, 0.0) + ms
    rows = []
    for instruction, ms in glow.items():
        conv = conv_of_glow_instruction(instruction)
        if conv is not None and all(c in ort_by_conv for c in conv.split(" + ")):
            rows.append((conv, ms, sum(ort_by_conv[c] for c in conv.split(" + "))))
    return sorted(rows, key=lambda row: row[2] - row[1])


def main() -> None:
    from glow_core.model_zoo import MODELS, random_inputs

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    model = MODELS[args.model](batch=args.batch)
    inputs = random_inputs(model, seed=0)
    glow = glow_profile(model, inputs, args.threads, args.runs)
    ort = ort_profile(model, inputs, args.threads, args.runs)
    rows = pairs(model, glow, ort)
    paired_glow, paired_ort = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"{args.model} batch {args.batch}, {args.threads} thread(s), median of {args.runs} profiled runs")
    print(f"all instructions: glow {sum(glow.values()):.2f} ms, onnxruntime nodes {sum(ort.values()):.2f} ms")
    print(f"{len(rows)} convolutions paired: glow {paired_glow:.2f} ms, onnxruntime {paired_ort:.2f} ms\n")
    print("| convolution | glow ms | ort ms | glow/ort | glow - ort ms |")
    print("|---|--:|--:|--:|--:|")
    for conv, glow_ms, ort_ms in rows:
        print(f"| {conv} | {glow_ms:.3f} | {ort_ms:.3f} | {glow_ms / ort_ms:.2f} | {glow_ms - ort_ms:+.3f} |")


if __name__ == "__main__":
    main()
