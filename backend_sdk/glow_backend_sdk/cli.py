"""The ``glow-sdk`` command: ``new`` renders a backend, ``update`` brings it up to the installed
template, ``check`` says what it can run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from glow_core.errors import exit_status


def cmd_new(args: argparse.Namespace) -> int:
    from glow_backend_sdk.render import render_backend

    destination = Path(args.dir or f"glow-{args.name}")
    render_backend(args.name, destination, vendor=args.vendor, device=args.device, primitives=args.primitives)
    print(f"rendered glow-{args.name} into {destination}")
    print(f"next: pip install -e '{destination}[test]' && glow conformance --backend {args.name}")
    if args.primitives:
        print(f"then: glow run zoo:resnet50 --backend {args.name},cpu --check (cpu runs what it does not)")
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    from glow_backend_sdk import TEMPLATE_VERSION
    from glow_backend_sdk.render import update_backend

    update_backend(Path(args.dir))
    print(f"updated {args.dir} to template {TEMPLATE_VERSION}: review `git diff`, resolve conflicts, commit")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from glow_backend_sdk.check import check_backend
    from glow_core.plugins import get_backend

    coverage = check_backend(get_backend(args.backend), node_tests=not args.models_only, limit=args.limit)
    print(coverage.summary(), end="")
    return 0


EXAMPLES = """\
examples:
  glow-sdk new acme --dir glow-acme     # render a backend package named glow-acme
  pip install -e 'glow-acme[test]'      # install it while you develop it
  glow conformance --backend acme       # the shared conformance suite on it
  glow-sdk check --backend acme         # which models and ONNX node tests it can run
  glow-sdk update glow-acme             # bring it up to the installed template
"""


def build_parser() -> argparse.ArgumentParser:
    from glow_backend_sdk import __version__

    parser = argparse.ArgumentParser(
        prog="glow-sdk",
        description="start and check a glow-py backend",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new", help="render a new backend package from the template")
    new.add_argument("name", help="backend name, a lowercase identifier (the package is glow-NAME)")
    new.add_argument("--dir", help="where to render (default: ./glow-NAME)")
    new.add_argument("--vendor", default="Your Company")
    new.add_argument("--device", default="npu", help="kind of device: cpu, gpu, npu, ...")
    new.add_argument(
        "--primitives",
        metavar="KIND,KIND,...",
        help="claim only these core primitives, e.g. Convolution,MatMul (a kernel file each; "
        "models then run with a backend named after it: --backend NAME,cpu); default: every core primitive",
    )
    new.set_defaults(func=cmd_new)
    update = sub.add_parser(
        "update", help="bring a rendered backend up to the installed template (copier update)"
    )
    update.add_argument("dir", nargs="?", default=".", help="the backend's folder, a clean git work tree")
    update.set_defaults(func=cmd_update)
    check = sub.add_parser("check", help="which models and ONNX node tests a backend's primitives can run")
    check.add_argument("--backend", help="an installed backend (default: the best installed)")
    check.add_argument("--models-only", action="store_true", help="skip the ONNX node tests")
    check.add_argument("--limit", type=int, help="look at the first N node tests only")
    check.set_defaults(func=cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return exit_status(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
