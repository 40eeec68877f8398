"""The float32 Softmax kernel (``kernels/softmax.py``) against the lowered softmax it
replaces: a zoo model compiled both ways, beside onnxruntime round-robin in one process
(shuffled order, the calling thread's CPU time, one thread), then the two builds'
per-instruction profiles: the softmax's instructions, before and after.

    .venv/bin/python bench/softmax_ab.py [--model bert_mini] [--batch 1] [--runs 60]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from model_ab import whole_model


@contextlib.contextmanager
def lowered() -> Iterator[None]:
    """Compile as before the kernel: every Softmax lowered to six kernels."""
    from glow_cpu.kernels import softmax

    saved = softmax.fused
    softmax.fused = lambda shape, axis: False
    try:
        yield
    finally:
        softmax.fused = saved


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="bert_mini")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    rows = ("the softmax's instructions", lambda name: "softmax" in name)
    whole_model(args.batch, args.runs, lowered, lambda model: set(), "", args.model, True, rows)


if __name__ == "__main__":
    main()
