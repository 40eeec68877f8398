"""Inverted residuals with and without their expansion and depthwise layers in one kernel
(``glow_cpu/kernels/expand_depthwise.py``), inside a zoo model.

The model is compiled with the fusion off (``fuse_depthwise=False``, "before") and on
("after"), both checked against
onnxruntime, then timed round-robin beside it (``round_robin.median_ms``), and profiled in
alternating rounds; per block, the expansion and depthwise rows of "before" are summed
against the fused row of "after" (which is named after both).

    .venv/bin/python bench/expand_depthwise_ab.py [--model mobilenetv2] [--batch 1] [--runs 200]
        [--threads 1] [--cpu-time] [--after-first]

Where each build lands in memory biases a comparison of builds in one process by 5-10%
(docs/performance.md, 2026-11-27): run both compile orders (``--after-first``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from model_ab import ort_session
from round_robin import median_ms

import glow_core
from glow_core.accuracy import relative_error
from glow_core.model_zoo import MODELS, random_inputs


def _parts(name: str, before: set[str]) -> tuple[str, str] | None:
    """The two instructions of "before" a fused row ``first+second`` of "after" is named after."""
    for cut in range(len(name)):
        if name[cut] == "+" and name[:cut] in before and name[cut + 1 :] in before:
            return name[:cut], name[cut + 1 :]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="mobilenetv2", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpu-time", action="store_true", help="time the calling thread's CPU time")
    parser.add_argument("--after-first", action="store_true", help="compile the 'after' builds first")
    args = parser.parse_args()
    model = MODELS[args.model](batch=args.batch)
    inputs = random_inputs(model, seed=0)
    order = [("before", False), ("after", False), ("before_p", True), ("after_p", True)]
    if args.after_first:
        order = [("after", False), ("before", False), ("after_p", True), ("before_p", True)]
    builds = {}
    for name, profile in order:
        options = {"threads": args.threads, "cache": False, "profile": profile}
        options["fuse_depthwise"] = not name.startswith("before")
        builds[name] = glow_core.compile(model, backend="cpu", options=options)
    session = ort_session(model, args.threads)
    expected = session.run(None, inputs)[0]
    for name in ("before", "after"):
        got = next(iter(builds[name].run(inputs).values()))
        print(f"{name}: relative error against onnxruntime {relative_error(got, expected):.2e}")
    engines = {"before": builds["before"].run, "after": builds["after"].run}
    engines["ort"] = lambda feeds: session.run(None, feeds)
    ms = median_ms(engines, inputs, args.runs, time.thread_time if args.cpu_time else time.perf_counter)
    print(
        f"{args.model} batch {args.batch}, {args.threads} thread(s), "
        f"{'CPU' if args.cpu_time else 'wall'} time, "
        f"median of {args.runs}: "
        f"glow before {ms['before']:.2f} ms ({ms['before'] / ms['ort']:.3f}x onnxruntime), "
        f"after {ms['after']:.2f} ms ({ms['after'] / ms['ort']:.3f}x), onnxruntime {ms['ort']:.2f} ms, "
        f"after/before {ms['after'] / ms['before']:.3f}"
    )
    rounds = max(2, args.runs // 12)
    before_names = {
        r.name for r in builds["before_p"].median_profile(builds["before_p"].check_inputs(inputs), 1)
    }
    after_rows = builds["after_p"].median_profile(builds["after_p"].check_inputs(inputs), 1)
    fused = {r.name: _parts(r.name, before_names) for r in after_rows if r.name not in before_names}
    fused = {name: parts for name, parts in fused.items() if parts}
    samples: dict[str, dict[str, list[float]]] = {"before_p": {}, "after_p": {}}
    totals: dict[str, list[float]] = {"before_p": [], "after_p": []}
    for round_ in range(rounds):
        for name in sorted(samples, reverse=round_ % 2 == 1):  # who goes first alternates
            compiled = builds[name]
            rows = {
                r.name: r.seconds * 1e3 for r in compiled.median_profile(compiled.check_inputs(inputs), 3)
            }
            for pair, parts in fused.items():
                value = rows[pair] if name == "after_p" else rows[parts[0]] + rows[parts[1]]
                samples[name].setdefault(pair, []).append(value)
            totals[name].append(sum(rows.values()))
    print(f"\nprofiles, median of {rounds} rounds of 3 runs: the two layers apart and in one kernel")
    print("\n| expansion + depthwise | before ms (two kernels) | after ms (one) | after/before |")
    print("|---|--:|--:|--:|")
    before_sum = after_sum = 0.0
    for pair in fused:
        old = statistics.median(samples["before_p"][pair])
        new = statistics.median(samples["after_p"][pair])
        before_sum, after_sum = before_sum + old, after_sum + new
        print(f"| {pair} | {old:.3f} | {new:.3f} | {new / old:.3f} |")
    print(
        f"| all {len(fused)} | {before_sum:.3f} | {after_sum:.3f} | {after_sum / max(before_sum, 1e-9):.3f} |"
    )
    old, new = statistics.median(totals["before_p"]), statistics.median(totals["after_p"])
    print(f"\nall instructions: before {old:.2f} ms, after {new:.2f} ms ({new / old:.3f})")


if __name__ == "__main__":
    main()
