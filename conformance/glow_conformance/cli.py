"""``glow conformance``: run the suite on one backend (or all of them) and write the scoreboard.

glow-core's ``glow`` command calls ``main`` lazily, so glow-core never depends on this
distribution. Exit status (the worst over the backends run): 0 PASS; 1 FAIL (a case failed,
crashed, timed out or errored, or an xfail passed); 4 INCOMPLETE (nothing failed, but a
layer could not run: every case of it was skipped); 5 NO CASES (nothing was generated or
selected, pytest's "no tests"); 2 for a usage error (an unknown backend, a malformed xfail
file). Only PASS is a pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence

from glow_conformance.case import LAYERS, Case, parse_layers, resolve_seed
from glow_conformance.isolation import DEFAULT_TIMEOUT, default_jobs
from glow_conformance.opsets import OpsetScope, opset_scope
from glow_conformance.report import headline, summary_rows, table, write_reports
from glow_conformance.results import COLUMNS, CaseResult, Outcome, RunVerdict, Scoreboard
from glow_conformance.side_by_side import (
    check_docs,
    docs_block,
    pass_rate_table,
    write_comparison,
    write_docs,
)
from glow_conformance.suite import SuiteOptions, plan, run_plan, run_references
from glow_core import progress as glow_progress
from glow_core.commands.progress import shown
from glow_core.errors import GlowError
from glow_core.plugins import registry

SHOWN_PROBLEMS = 30
"""Failures printed per target; the report holds them all."""


EXAMPLES = """\
examples:
  glow conformance --backend interpreter --layers primitives   # one layer, about a minute
  glow conformance --backend cpu --report out/                  # every layer; scoreboard in out/
  glow conformance --backend cpu --select 'MatMul[*'            # some cases only
  glow conformance --all                                        # every installed backend side by side
"""


def build_parser() -> argparse.ArgumentParser:
    from glow_conformance import __version__

    parser = argparse.ArgumentParser(
        prog="glow conformance",
        description="Check a glow backend against the primitive contract, the ONNX node tests "
        "and the model zoo, and write a scoreboard.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"glow-conformance {__version__}")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--backend",
        metavar="NAME",
        action="append",
        help="an installed backend to check (`glow backends`); repeat it for a side-by-side run",
    )
    target.add_argument(
        "--all", action="store_true", help="every installed backend, beside onnxruntime and onnx.reference"
    )
    target.add_argument(
        "--self-test",
        action="store_true",
        help="score the suite itself: plant each realistic kernel bug of glow-backend-sdk's list into "
        "the backend template, one at a time, and report the share caught and every escape",
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
    parser.add_argument(
        "--docs",
        metavar="PAGE",
        help="write the ONNX pass-rate table (with the references, date and versions) into this "
        "Markdown page between its onnx-pass-rates markers, e.g. docs/onnx-support.md",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a case that runs longer and record it as timeout (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=default_jobs(),
        metavar="N",
        help="worker processes running cases side by side (default: one per CPU, here %(default)s)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the cases in this process, not in a worker: no timeout, and a crash ends the run "
        "(for debugging a kernel)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the run seed every case's inputs derive from (default: a fresh one per run, or "
        "$GLOW_CONFORMANCE_SEED); a failure prints the seed that replays it",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case that does not pass")
    return parser


class _Progress:
    """One line per finished layer (and, verbose, one per case that did not pass)."""

    def __init__(self, backend: str, cases: list[Case], verbose: bool):
        self.backend = backend
        self.totals = Counter(c.layer for c in cases)
        self.remaining = Counter(self.totals)
        self.verbose = verbose
        self.start = time.perf_counter()
        self.layer = ""

    def __call__(self, result: CaseResult) -> None:
        if self.verbose and result.outcome is not Outcome.PASSED:
            print(f"  {result.outcome.value:11} {result.id}: {result.message}", flush=True)
        self.remaining[result.layer] -= 1
        if result.layer != self.layer:  # the live line (on a terminal) follows the layer
            self.layer = result.layer
            glow_progress.step(f"{self.backend}: {result.layer}")
        total = self.totals[result.layer]
        glow_progress.advance(total - self.remaining[result.layer], total, "cases")
        if not self.remaining[result.layer]:
            print(f"  {result.layer} done at {time.perf_counter() - self.start:.1f} s", flush=True)


def _run_backend(name: str, options: SuiteOptions, args: argparse.Namespace) -> Scoreboard:
    the_plan = plan(registry().get(name), options)
    print(
        f"{name}: {len(the_plan.cases)} cases ({', '.join(options.layers)}), seed {the_plan.seed}", flush=True
    )
    if not the_plan.cases and options.select:
        print(f"  no case matches {' or '.join(options.select)}", flush=True)
    progress = _Progress(name, the_plan.cases, args.verbose)
    with shown():
        return run_plan(the_plan, progress, isolate=not args.in_process, timeout=args.timeout, jobs=args.jobs)


def _summarize(board: Scoreboard) -> None:
    print(headline(board).replace("**", ""))
    print("\n".join(table(["layer", *COLUMNS], summary_rows(board))))
    bad = board.problems()
    for r in bad[:SHOWN_PROBLEMS]:
        print(f"  {r.outcome.value:8} {r.id}: {r.message}")
    if len(bad) > SHOWN_PROBLEMS:
        print(f"  ... and {len(bad) - SHOWN_PROBLEMS} more (write them all with --report DIR)")
    print()


def _docs_command(args: argparse.Namespace) -> str:
    """The command that regenerates the docs table, as a reader would type it (paths relative
    to the working directory, or just a name, so no machine's paths end up in the page)."""
    page = os.path.relpath(args.docs)
    targets = "--all" if args.all else " ".join(f"--backend {name}" for name in dict.fromkeys(args.backend))
    parts = ["glow conformance", targets, "--layers onnx"]
    parts += [f"--select '{p}'" for p in args.select]
    parts += ["--onnx-data DIR"] if args.onnx_data else []
    parts.append(f"--docs {page if not page.startswith('..') else os.path.basename(args.docs)}")
    return " ".join(parts)


def _print_pass_rates(boards: list[Scoreboard], scope: OpsetScope) -> None:
    rates = pass_rate_table(boards, scope)
    if rates:
        print("ONNX node tests passed:")
        print("\n".join(rates))
        print()


def _self_test(args: argparse.Namespace) -> int:
    """``--self-test``: the mutation score; exit 0 when every planted bug is caught, else 1."""
    from glow_conformance.self_test import run_self_test

    print("self-test: planting each mutant into the backend template, one at a time", flush=True)
    report = run_self_test(seed=resolve_seed(args.seed), progress=lambda r: print(".", end="", flush=True))
    print()
    print("\n".join(report.lines()))
    return 1 if report.escapes else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.self_test:
        try:
            return _self_test(args)
        except GlowError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    try:
        options = SuiteOptions(
            parse_layers(args.layers), args.slow, tuple(args.select), args.onnx_data, resolve_seed(args.seed)
        )
        if args.docs:
            if "onnx" not in options.layers:
                raise GlowError("--docs writes ONNX pass rates; include the onnx layer (--layers onnx)")
            check_docs(args.docs)
        names = sorted(registry().infos()) if args.all else list(dict.fromkeys(args.backend))
        if not names:
            raise GlowError("no glow backend is installed (`glow backends` shows load errors)")
        if args.timeout <= 0:
            raise GlowError(f"--timeout must be positive, got {args.timeout:g}")
        if args.jobs < 1:
            raise GlowError(f"--jobs must be at least 1, got {args.jobs}")
        boards = [_run_backend(name, options, args) for name in names]
        if (args.all or args.docs) and "onnx" in options.layers:
            boards += run_references(options)
        scope = opset_scope(options.onnx_data) if "onnx" in options.layers else None
    except GlowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for board in boards:
        _summarize(board)
    if scope is not None:
        _print_pass_rates(boards, scope)
    if args.report:
        side_by_side = args.all or len(boards) > 1
        written = (
            write_comparison(boards, args.report, scope)
            if side_by_side
            else write_reports(boards[0], args.report)
        )
        print("wrote " + ", ".join(str(p) for p in written[-2:]))
    if args.docs and scope is not None:
        try:
            page = write_docs(args.docs, docs_block(boards, scope, _docs_command(args)))
        except GlowError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"wrote the pass-rate table into {page}")
    verdicts = [b.verdict for b in boards if b.meta.get("role") == "backend"]
    worst = max(verdicts, key=VERDICT_ORDER.index)
    return worst.exit_status


VERDICT_ORDER = [RunVerdict.PASS, RunVerdict.EMPTY, RunVerdict.INCOMPLETE, RunVerdict.FAIL]
"""From best to worst: the exit status of a run over several backends is the worst one's."""
