"""``python -m fuzz`` (what ``scripts/fuzz`` runs): a campaign, or a replay of saved models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuzz.campaign import run_campaign
from fuzz.check import FAILURES
from fuzz.spec import file_recipe
from fuzz.supervisor import Supervisor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/fuzz",
        description="Fuzz glow with generated and mutated ONNX models; exit status 1 if any case fails.",
    )
    parser.add_argument("--minutes", type=float, help="stop starting cases after this long")
    parser.add_argument("--cases", type=int, help="number of cases (default 1000 without --minutes)")
    parser.add_argument(
        "--seed", type=int, default=0, help="campaign seed: case i of seed S is always the same"
    )
    parser.add_argument(
        "--backend", default="interpreter", help="glow backend to run (interpreter, cpu, opencl)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--memory-mb", type=int, default=3072, help="address-space cap per worker")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it is a hang")
    parser.add_argument("--out", type=Path, help="directory for minimized reproducers (.onnx + .txt)")
    parser.add_argument("--no-minimize", action="store_true", help="save failing cases as found")
    parser.add_argument(
        "--replay", nargs="+", type=Path, metavar="MODEL", help="run saved .onnx files instead"
    )
    args = parser.parse_args(argv)

    if args.replay:
        return _replay(args)
    cases = args.cases if args.cases is not None or args.minutes is not None else 1000
    summary = run_campaign(
        args.seed,
        cases,
        args.minutes,
        args.backend,
        args.workers,
        args.memory_mb,
        args.timeout,
        args.out,
        shrink=not args.no_minimize,
        progress=True,
    )
    print(summary.text())
    return 1 if summary.failed else 0


def _replay(args: argparse.Namespace) -> int:
    failed = False
    with Supervisor(args.backend, args.workers, args.memory_mb, args.timeout) as supervisor:
        for result in supervisor.run([file_recipe(path) for path in args.replay]):
            error = result.error or {}
            detail = (
                f"{error.get('type', '')} at {error.get('site', '')}: {error.get('message', '')}"
                if error
                else ""
            )
            print(f"{result.recipe['id']}: {result.outcome} {detail or result.note}")
            failed |= result.outcome in FAILURES
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
