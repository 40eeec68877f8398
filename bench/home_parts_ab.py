"""Two threads claiming their own parts first against one counter per phase
(``claims.HOME_PARTS_FIRST``; docs/performance.md, "Two threads: each claims its own parts
first"), on a zoo model in one process.

Three builds: one thread, two threads with one claim counter per phase ("counter"), two
threads with home parts first ("home"). Each two-thread run follows a one-thread run, so the
two-thread builds' workers have gone to sleep (as in ``model_scaling.py``) and neither
build's spinning worker takes a core from the other; the two take turns going first. Prints
the medians and each build's scaling, then the sum of per-instruction profile medians of
profiled two-thread builds in alternating rounds. Where a build lands in memory biases whole
runs by 1-2%: run both compile orders (``--home-first``).

    taskset -c 0,1 .venv/bin/python bench/home_parts_ab.py resnet50 [--batch 1] [--rounds 30] [--home-first]
"""

from __future__ import annotations

import argparse
import statistics
import time

import glow_core
from glow_core.model_zoo import MODELS, random_inputs


def _build(model, threads: int, home: bool, profile: bool = False):
    from glow_cpu import claims

    saved = claims.HOME_PARTS_FIRST
    claims.HOME_PARTS_FIRST = home
    try:
        options = {"threads": threads, "cache": False, "profile": profile}
        return glow_core.compile(model, backend="cpu", options=options)
    finally:
        claims.HOME_PARTS_FIRST = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--home-first", action="store_true", help="compile the home-first builds first")
    args = parser.parse_args()
    model = MODELS[args.model](batch=args.batch)
    feeds = random_inputs(model, seed=5)
    one = _build(model, 1, True)
    order = (True, False) if args.home_first else (False, True)
    two = {("home" if home else "counter"): _build(model, 2, home) for home in order}
    profiled = {("home" if home else "counter"): _build(model, 2, home, profile=True) for home in order}
    for compiled in (one, *two.values()):
        for _ in range(5):
            compiled.run(feeds)
    times: dict[str, list[float]] = {"one": [], "counter": [], "home": []}

    def timed(name: str, compiled) -> None:
        start = time.perf_counter()
        compiled.run(feeds)
        times[name].append((time.perf_counter() - start) * 1e3)

    for round_ in range(args.rounds):
        for name in sorted(two, reverse=round_ % 2 == 1):
            timed("one", one)
            timed(name, two[name])
    ms = {name: statistics.median(values) for name, values in times.items()}
    print(f"# {args.model} batch {args.batch}, {args.rounds} rounds")
    print(f"one thread {ms['one']:.2f} ms")
    for name in ("counter", "home"):
        print(f"two threads, {name}: {ms[name]:.2f} ms, scaling {ms['one'] / ms[name]:.3f}x")
    rows: dict[str, dict[str, list[float]]] = {name: {} for name in profiled}
    for round_ in range(max(2, args.rounds // 3)):
        for name in sorted(profiled, reverse=round_ % 2 == 1):
            for row in profiled[name].median_profile(feeds, 3):
                rows[name].setdefault(row.name, []).append(row.seconds * 1e3)
    for name, per_instruction in rows.items():
        total = sum(statistics.median(values) for values in per_instruction.values())
        print(f"two threads, {name}: instructions {total:.2f} ms (sum of per-instruction medians)")


if __name__ == "__main__":
    main()
