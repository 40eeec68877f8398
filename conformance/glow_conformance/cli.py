"""``glow conformance``: run the suite on one backend (or all of them) and write the scoreboard.

glow-core's ``glow`` command calls ``main`` lazily, so glow-core never depends on this
distribution. Exit status: 0 when every run passes, 1 when a case failed (or an xfail
passed, or an error), 2 for a usage error (an unknown backend, a malformed xfail file).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence

from glow_conformance.case import LAYERS, Case, parse_layers
from glow_conformance.comparison import write_comparison
from glow_conformance.report import headline, summary_rows, table, write_reports
from glow_conformance.results import COLUMNS, CaseResult, Outcome, Scoreboard
from glow_conformance.suite import SuiteOptions, plan, run_plan, run_references
from glow_core.errors import GlowError
from glow_core.plugins import registry

SHOWN_PROBLEMS = 30
"""Failures printed per target; the report holds them all."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glow conformance",
        description="Check a glow backend against the primitive contract, the ONNX node tests "
        "and the model zoo, and write a scoreboard.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--backend", metavar="NAME", help="the installed backend to check (`glow backends`)")
    target.add_argument(
        "--all", action="store_true", help="every installed backend, beside onnxruntime and onnx.reference"
    )
    parser.add_argument("--report", metavar="DIR", help="write scoreboard.json and scoreboard.md here")
    parser.add_argument("--layers", default=",".join(LAYERS), help=f"comma-separated subset of {LAYERS}")
    parser.add_argument("--slow", action="store_true", help="also run slow models (ResNet-50)")
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only case ids matching this shell pattern, e.g. 'MatMul[*' or 'onnx:test_conv*' (repeatable)",
    )
    parser.add_argument("--onnx-data", metavar="DIR", help="ONNX node-test directory (default: onnx's own)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case that does not pass")
    return parser


class _Progress:
    """One line per finished layer (and, verbose, one per case that did not pass)."""

    def __init__(self, cases: list[Case], verbose: bool):
        self.remaining = Counter(c.layer for c in cases)
        self.verbose = verbose
        self.start = time.perf_counter()

    def __call__(self, result: CaseResult) -> None:
        if self.verbose and result.outcome is not Outcome.PASSED:
            print(f"  {result.outcome.value:11} {result.id}: {result.message}", flush=True)
        self.remaining[result.layer] -= 1
        if not self.remaining[result.layer]:
            print(f"  {result.layer} done at {time.perf_counter() - self.start:.1f} s", flush=True)


def _run_backend(name: str, options: SuiteOptions, verbose: bool) -> Scoreboard:
    the_plan = plan(registry().get(name), options)
    print(f"{name}: {len(the_plan.cases)} cases ({', '.join(options.layers)})", flush=True)
    return run_plan(the_plan, _Progress(the_plan.cases, verbose))


def _summarize(board: Scoreboard) -> None:
    print(headline(board).replace("**", ""))
    print("\n".join(table(["layer", *COLUMNS], summary_rows(board))))
    bad = board.problems()
    for r in bad[:SHOWN_PROBLEMS]:
        print(f"  {r.outcome.value:8} {r.id}: {r.message}")
    if len(bad) > SHOWN_PROBLEMS:
        print(f"  ... and {len(bad) - SHOWN_PROBLEMS} more (write them all with --report DIR)")
    print()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        options = SuiteOptions(parse_layers(args.layers), args.slow, tuple(args.select), args.onnx_data)
        names = sorted(registry().infos()) if args.all else [args.backend]
        if not names:
            raise GlowError("no glow backend is installed (`glow backends` shows load errors)")
        boards = [_run_backend(name, options, args.verbose) for name in names]
        if args.all and "onnx" in options.layers:
            boards += run_references(options)
    except GlowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for board in boards:
        _summarize(board)
    if args.report:
        written = write_comparison(boards, args.report) if args.all else write_reports(boards[0], args.report)
        print("wrote " + ", ".join(str(p) for p in written[-2:]))
    return 0 if all(b.ok for b in boards if b.meta.get("role") == "backend") else 1
