"""``glow profile`` and the ``--quantize`` options of ``glow run``: kept apart from cli.py
so the quantization flags live in one place."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from glow_core.errors import InputError


def add_profile_command(sub: argparse._SubParsersAction, model_args) -> None:  # type: ignore[type-arg]
    """``glow profile MODEL --random N -o profile.json``."""
    p = sub.add_parser("profile", help="record the range of every float value over calibration inputs")
    model_args(p)
    p.add_argument("--random", type=int, metavar="N", required=True, help="N seeded standard-normal batches")
    p.add_argument("--seed", type=int, default=0, help="seed of the first random batch (then seed+1, ...)")
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.json")
    p.set_defaults(func=cmd_profile)


def add_quantize_options(p: argparse.ArgumentParser) -> None:
    """``--quantize PROFILE.json [--schema S] [--per-channel] [--calibration C]`` or
    ``--precision fp16|bf16``."""
    from glow_core.quantization import CALIBRATIONS, FLOAT_MODES, SCHEMAS

    p.add_argument("--quantize", metavar="PROFILE.json", help="compile in int8 from this profile")
    p.add_argument("--schema", choices=SCHEMAS, default="asymmetric", help="with --quantize")
    p.add_argument("--per-channel", action="store_true", help="with --quantize: a weight scale per channel")
    p.add_argument("--calibration", choices=CALIBRATIONS, default="minmax", help="with --quantize")
    p.add_argument(
        "--keep-float", action="append", default=[], metavar="KIND_OR_NAME", help="with --quantize"
    )
    p.add_argument("--precision", choices=tuple(FLOAT_MODES), help="run float32 compute in fp16 or bf16")


def precision_of(args: argparse.Namespace) -> object:
    """The ``precision=`` argument ``glow_core.compile`` gets from the parsed options."""
    from glow_core.quantization import Quantize

    if args.quantize and args.precision:
        raise InputError("--quantize and --precision exclude each other: choose one")
    if args.quantize:
        return Quantize(
            args.quantize,
            schema=args.schema,
            per_channel=args.per_channel,
            calibration=args.calibration,
            keep=frozenset(args.keep_float),
        )
    return args.precision


def cmd_profile(args: argparse.Namespace) -> int:
    import glow_core
    from glow_core.commands.arguments import backend_arg, load_onnx_proto
    from glow_core.commands.shapes import parse_shapes
    from glow_core.model_zoo import random_inputs

    if args.random < 1:
        raise InputError(f"--random {args.random}: give at least one batch")
    proto = load_onnx_proto(args.model)
    shapes = parse_shapes(args.shape) or None
    backend = backend_arg(args.backend) or "interpreter"
    if shapes:  # the shapes given, for models with symbolic dimensions
        batches = (_batch(shapes, args.seed + i) for i in range(args.random))
    else:
        batches = (random_inputs(proto, args.seed + i) for i in range(args.random))
    profile = glow_core.profile(proto, batches, backend, input_shapes=shapes)
    profile.save(args.output)
    print(
        f"profiled {len(profile.tensors)} values over {profile.batches} batches -> {args.output}",
        file=sys.stderr,
    )
    return 0


def _batch(shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
