"""``glow bundle``: the command-line face of ``glow_core.bundle`` (its own module, so the
CLI only registers it: ``add_bundle_command(subparsers)``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from glow_core.errors import BundleError


def add_bundle_command(sub: argparse._SubParsersAction) -> None:
    """Register ``glow bundle`` on the CLI's subcommands."""
    p = sub.add_parser(
        "bundle",
        help="compile models ahead of time: NAME.o, NAME.h, NAME.json, NAME.weights.bin",
        description="Compile one or more models into an AOT bundle a C program links "
        "(docs/bundles.md). Several models give one entry point each, sharing one weights file.",
    )
    p.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="an .onnx file or zoo:NAME; ENTRY=MODEL names its entry point (default: the "
        "bundle's name for one model, the file's stem for several)",
    )
    p.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="directory to write (created if missing)"
    )
    p.add_argument("--name", help="the bundle's name: file names and C symbols (default: the model's stem)")
    p.add_argument("--backend", default="cpu", help="a backend that writes object code (default cpu)")
    p.add_argument("--weights", choices=("file", "embedded"), default="file", help="where the constants go")
    p.add_argument(
        "--target",
        metavar="TRIPLE",
        help="LLVM target triple, e.g. aarch64-linux-gnu (default: this machine)",
    )
    p.add_argument(
        "--cpu", metavar="NAME", help="target CPU, e.g. cortex-a72 (default: this machine's, or generic)"
    )
    p.add_argument(
        "--shape", action="append", default=[], metavar="NAME=D1,D2", help="input shape (every model)"
    )
    p.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="a backend option (threads=4)"
    )
    p.add_argument(
        "--shared", action="store_true", help="also link NAME.so (for load_bundle) with the C compiler"
    )
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    from glow_core.bundles.write import bundle
    from glow_core.commands.arguments import load_onnx_proto, parse_options
    from glow_core.commands.shapes import parse_shapes

    models = {}
    for spec in args.models:
        entry, sep, model = spec.partition("=")
        if not sep:
            entry, model = "", spec
        if not entry:
            entry = _stem(model) if len(args.models) > 1 else (args.name or _stem(model))
        if entry in models:
            raise BundleError(f"two models would have the entry point {entry!r}; name them with ENTRY=MODEL")
        models[entry] = load_onnx_proto(model)
    name = args.name or (next(iter(models)) if len(models) == 1 else None)
    if name is None:
        raise BundleError("several models: give the bundle a name with --name")
    manifest = bundle(
        models,
        args.output,
        name=name,
        backend=args.backend,
        options=parse_options(args.option),
        weights=args.weights,
        target=args.target,
        cpu=args.cpu,
        input_shapes=parse_shapes(args.shape) or None,
        shared=args.shared,
    )
    out = Path(args.output)
    for role, file in manifest.files.items():
        print(f"{role:8} {out / file} ({(out / file).stat().st_size} bytes)")
    for entry in manifest.entries:
        print(
            f"entry    {entry.name}: constants {entry.constant_bytes} B at {entry.constant_offset}, "
            f"mutable {entry.mutable_bytes} B, activations {entry.activation_bytes} B"
        )
    print(
        f"target   {manifest.triple} ({manifest.cpu}); weights {manifest.weights}, {manifest.weights_bytes} B"
    )
    return 0


def _stem(model: str) -> str:
    """A C name from a model's file or zoo name: ``zoo:small_cnn`` -> small_cnn, ``my-net.onnx`` -> my_net."""
    stem = Path(model.removeprefix("zoo:")).stem
    return "".join(c if c.isalnum() else "_" for c in stem)
