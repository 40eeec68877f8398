"""An attention's scale applied as its scores product stores (a BatchMatMul with a fused
element-wise chain, ``fusion.GEMM_PRODUCERS``) against the scale as a kernel of its own
("before": BatchMatMul not a producer), inside a zoo model.

Both builds are checked against onnxruntime, timed round-robin beside it and profiled in
alternating rounds (``model_ab.whole_model``); the table sums the scores and scale
instructions of each build.

    .venv/bin/python bench/batch_matmul_chain_ab.py [--model bert_mini] [--batch 8] [--runs 40]
        [--cpu-time] [--after-first]

Where each build lands in memory biases a comparison of builds in one process by 5-10%
(docs/performance.md, 2026-11-27): run both compile orders (``--after-first``) and read the
instructions the change touches rather than the whole model.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(__file__))

from model_ab import whole_model


@contextlib.contextmanager
def scale_apart() -> Iterator[None]:
    """Compile as before the change: a BatchMatMul takes no chain."""
    from glow_cpu import fusion

    saved = fusion.GEMM_PRODUCERS, fusion.PRODUCERS
    fusion.GEMM_PRODUCERS = saved[0] - {"BatchMatMul"}
    fusion.PRODUCERS = saved[1] - {"BatchMatMul"}
    try:
        yield
    finally:
        fusion.GEMM_PRODUCERS, fusion.PRODUCERS = saved


def _scores_or_scale(name: str) -> bool:
    return "/attn/scores" in name or "/attn/scale" in name


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--model", default="bert_mini")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--cpu-time", action="store_true", help="time the calling thread's CPU time")
    parser.add_argument("--after-first", action="store_true", help="compile the 'after' builds first")
    args = parser.parse_args()
    whole_model(
        args.batch,
        args.runs,
        scale_apart,
        lambda model: set(),
        "",
        args.model,
        args.cpu_time,
        instructions=("attention scores and scale", _scores_or_scale),
        after_first=args.after_first,
    )


if __name__ == "__main__":
    main()
